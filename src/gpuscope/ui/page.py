"""The page `gpuscope ui` serves: one tab per form (ui/forms.py), a result area that shows the command that ran,
its one-sentence error, or its views (report/html sections, drawn by the same ``gsDraw`` as a report) and its
JSON. Everything is local: plotly.js comes from the server (/plotly.min.js), no other address is used."""

from __future__ import annotations

from functools import lru_cache

from gpuscope.report.html.page import BOOT, NO_ICON, STYLE, esc
from gpuscope.ui.forms import FORMS, Field, Form

UI_STYLE = """
nav button{margin:2px 4px 2px 0;padding:6px 10px;border:1px solid #bbb;background:#f6f6f6;cursor:pointer}
nav button.on{background:#235;color:#fff}form.gs-form{display:none;margin:1em 0}form.gs-form.on{display:block}
form.gs-form label{display:inline-block;margin:4px 12px 4px 0;font-size:.9em}
form.gs-form input[type=text]{width:22em}form.gs-form input[type=number]{width:7em}
#gs-command{font-family:monospace;font-size:.85em;color:#333}#gs-busy{color:#666}
"""
SCRIPT = """
function gsShow(id){document.querySelectorAll('form.gs-form').forEach(function(f){f.classList.toggle('on',f.id===id);});
document.querySelectorAll('nav button').forEach(function(b){b.classList.toggle('on',b.dataset.form===id);});}
function gsValues(form){var v={};form.querySelectorAll('input,select').forEach(function(el){
v[el.name]=el.type==='checkbox'?(el.checked?'1':''):el.value;});return v;}
function gsSubmit(ev){ev.preventDefault();var form=ev.target;var err=document.getElementById('gs-error');
var views=document.getElementById('gs-views');var out=document.getElementById('gs-json');
var cmd=document.getElementById('gs-command');err.textContent='';views.innerHTML='';out.textContent='';
cmd.textContent='';document.getElementById('gs-busy').textContent='working...';
document.body.dataset.state='busy';
fetch('/api/run',{method:'POST',headers:{'Content-Type':'application/json'},
body:JSON.stringify({form:form.id,values:gsValues(form)})}).then(function(r){return r.json();}).then(function(d){
document.getElementById('gs-busy').textContent='';
if(d.argv){cmd.textContent='gpuscope '+d.argv.join(' ')+' --json';}
if(!d.ok){err.textContent=d.error;document.body.dataset.state='error';return;}
views.innerHTML=d.html;gsDraw(views);out.textContent=JSON.stringify(d.result,null,2);
document.body.dataset.state='done';}).catch(function(e){document.getElementById('gs-busy').textContent='';
err.textContent='the server did not answer ('+e+').';document.body.dataset.state='error';});}
document.addEventListener('DOMContentLoaded',function(){
document.querySelectorAll('form.gs-form').forEach(function(f){f.addEventListener('submit',gsSubmit);});
document.querySelectorAll('nav button').forEach(function(b){
b.addEventListener('click',function(){gsShow(b.dataset.form);});});
gsShow('%s');document.body.dataset.state='ready';});
""" % FORMS[0].id


def _field(form: Form, f: Field) -> str:
    fid = f"{form.id}-{f.name}"
    if f.check:
        checked = " checked" if f.default else ""
        return f'<label><input type="checkbox" id="{fid}" name="{esc(f.name)}"{checked}> {esc(f.label)}</label>'
    if f.choices:
        opts = "".join(f'<option value="{esc(c)}"{" selected" if c == f.default else ""}>{esc(c or "(default)")}'
                       "</option>" for c in f.choices)
        return f'<label>{esc(f.label)} <select id="{fid}" name="{esc(f.name)}">{opts}</select></label>'
    kind = "number\" step=\"any" if f.number else "text"
    return (f'<label>{esc(f.label)} <input type="{kind}" id="{fid}" name="{esc(f.name)}" '
            f'value="{esc(f.default)}"></label>')


def _form(form: Form) -> str:
    fields = "".join(_field(form, f) for f in form.fields)
    return (f'<form class="gs-form" id="{form.id}"><h2>{esc(form.title)}</h2>{fields}<br>'
            f'<button type="submit" id="{form.id}-submit">Estimate</button></form>')


@lru_cache(maxsize=1)
def page() -> str:
    tabs = "".join(f'<button type="button" data-form="{f.id}">{esc(f.title)}</button>' for f in FORMS)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{NO_ICON}<title>gpuscope</title>"
            f"<style>{STYLE}{UI_STYLE}</style><script src=\"/plotly.min.js\"></script><script>{BOOT}</script>"
            f"<script>{SCRIPT}</script></head><body><h1>gpuscope</h1>"
            "<p class=\"gs-note\">Does it fit, how fast, what does it cost: each form runs the gpuscope command "
            "shown below it on this machine and draws its result.</p>"
            f"<nav>{tabs}</nav>{''.join(_form(f) for f in FORMS)}"
            "<p id=\"gs-busy\"></p><p id=\"gs-command\"></p><p id=\"gs-error\" class=\"gs-error\" role=\"alert\"></p>"
            "<div id=\"gs-views\"></div><h2>JSON</h2><pre id=\"gs-json\" class=\"gs-json\"></pre></body></html>\n")
