"""memrl.agents"""
