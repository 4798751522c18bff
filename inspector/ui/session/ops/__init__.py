"""One module per operation's settings (`OpSettings` subclasses registered by op name).

Every module here is imported by `op_settings.settings_classes()`: a new op's settings module
dropped here is found without editing any list.
"""
