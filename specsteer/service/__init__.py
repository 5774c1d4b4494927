"""The application service shared by the app's tabs and the CLI: a façade (``app_service``) over small services
for generation, evaluation runs, annotation and campaigns, the events they report, and the GUI-free decisions
of each page."""
