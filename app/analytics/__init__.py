"""Training-step analytics: reads of the rollups (steps.py), search (search.py), and the page
data of the step page, chart pages, task changes, compare and search (pages.py). The rollups are
written by app/store/rollups.py; the figures are built by the chart registry in app/charts.py."""
