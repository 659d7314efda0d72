from .cli.group import main

main()
