"""memrl.data"""
