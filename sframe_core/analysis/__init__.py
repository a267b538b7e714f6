"""What machine code does to the frame: one decoder per ABI, jump tables, the saved-register dataflow."""
