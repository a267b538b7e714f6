"""What every layer uses: the ABIs, the row model, errors, opening files, reading memory."""
