"""The user's application package the docs name (``app.tasks:send_email``): a placeholder."""
