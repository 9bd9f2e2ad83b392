"""The delivery latency report from message trace."""
