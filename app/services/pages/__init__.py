"""What the web UI's pages draw (and the comparison the compare page and the API share), built from the read
side."""
