"""`panel serve inspector`: Bokeh runs this once per browser session (absolute imports only)."""

import panel as pn

from inspector.ui.app import create_app, freeze_long_lived

pn.extension("tabulator")
freeze_long_lived()  # the first session only: what the server imported, out of gc's sight
create_app().servable()
