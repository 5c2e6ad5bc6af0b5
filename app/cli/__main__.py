"""`python -m app.cli`: the `rollscope` command."""
from app.cli import main

main()
