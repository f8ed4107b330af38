from loomtui.cli import entry

entry()
