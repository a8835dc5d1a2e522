from resdom.cli.main import app

app()
