"""The unwind step: rows to the caller's registers, stop reasons, addresses, frames without rows."""
