"""The user's application package the docs name (``myapp.tasks:send_email``): a placeholder."""
