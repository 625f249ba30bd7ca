"""memrl.cli"""
