"""memrl.memory"""
