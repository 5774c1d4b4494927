"""The application service shared by the app's tabs and the CLI, and the stores it needs."""
