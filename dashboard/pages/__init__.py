"""One module per page; each has ``register(app, config)`` that calls ``dash.register_page``."""
