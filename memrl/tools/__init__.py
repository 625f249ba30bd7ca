"""memrl.tools"""
