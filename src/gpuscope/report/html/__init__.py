"""HTML views: one self-contained page of plotly figures (plotly.js inlined), tables and provenance, for a results
database (`gpuscope report`), one command's result (`plan|compare|bench ... --html`) and the local web page
(`gpuscope ui`). Computes nothing new: it draws the value objects the library returns. docs/report.md says why
plotly."""
