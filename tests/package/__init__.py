"""The package as a whole: its layers, its wheel, its docs, its checks and its test kit."""
