"""memrl.integrations"""
