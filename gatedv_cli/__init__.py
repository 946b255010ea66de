"""The `gatedv` command line below its entry point `cli.py`: how a command fails (`group`), the options several
commands share (`options`), the unreadable files one command passed over (`skipped`), and the commands, one module
per home: `statistics`, `model_data`, `training`, `grid`, `report_demo`.

Every command declares its options and calls the library; the checks of what the user asked live in the library.
"""
