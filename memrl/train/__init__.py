"""memrl.train"""
