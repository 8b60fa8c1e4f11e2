"""One module per page; each has ``register(app, config)`` that calls ``dash.register_page``.

``run_panels`` holds the run page's callback work so the page module stays about layout.
"""
