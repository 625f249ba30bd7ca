"""memrl.llm"""
