"""`gpuscope ui`: a local web page with forms for plan, compare and advise (ui/forms.py), served by ui/server.py,
drawn with the report's views (report/html)."""
