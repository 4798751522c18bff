"""`panel serve inspector`: Bokeh runs this once per browser session (absolute imports only)."""

import panel as pn

from inspector.ui.app import create_app

pn.extension("tabulator")
create_app().servable()
