"""`moetune report`: a plan, its pick explained and its sweep as one self-contained HTML page (plan_report.py)."""
