package admin

// pageHTML is the admin page: server-rendered by html/template, which
// escapes every value for its context (payloads and errors are text in
// <pre>, never markup), with one inline script and style, allowed by the
// response's Content-Security-Policy nonce and nothing else. The script
// only asks for confirmation before a form is sent; without it the forms
// still work.
const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>herald · {{.Table}}</title>
<style nonce="{{.Nonce}}">
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: .35em .5em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: 0; max-width: 40em; max-height: 12em; overflow: auto; white-space: pre-wrap; word-break: break-all; background: #fafafa; padding: .3em; }
pre.err { color: #a00; }
.msg { background: #eef7ee; border: 1px solid #9c9; padding: .5em; }
.bad { background: #fbeaea; border: 1px solid #c99; padding: .5em; }
.paused { color: #a60; font-weight: bold; }
form { display: inline; margin: 0; }
button { cursor: pointer; }
.muted { color: #777; }
</style>
</head>
<body>
<h1>herald outbox <code>{{.Table}}</code> <span class="muted">({{.Dialect}})</span></h1>
{{with .Msg}}<p class="msg" id="msg">{{.}}</p>{{end}}
{{with .Err}}<p class="bad">{{.}}</p>{{end}}

<h2>Backlog per topic</h2>
<table id="backlog">
<tr><th>Topic</th><th>Pending</th><th>Oldest pending</th><th>Dead letters</th><th>State</th><th></th></tr>
{{range .Backlog}}<tr>
<td><code>{{.Topic}}</code></td><td class="n">{{.Pending}}</td><td class="n">{{age .OldestPendingAge}}</td><td class="n">{{.DeadLettered}}</td>
<td>{{if .Paused}}<span class="paused">paused</span>{{else}}flowing{{end}}</td>
<td>{{if .Paused}}<form method="post" action="resume" data-confirm="Resume {{.Topic}}? Relays lease its events again at their next poll.">
<input type="hidden" name="csrf" value="{{$.Token}}"><input type="hidden" name="topic" value="{{.Topic}}"><button class="resume">Resume</button></form>
{{else}}<form method="post" action="pause" data-confirm="Pause {{.Topic}}? Relays stop leasing its events (and their keys' later events) at their next poll.">
<input type="hidden" name="csrf" value="{{$.Token}}"><input type="hidden" name="topic" value="{{.Topic}}"><input name="reason" placeholder="reason" size="14"> <button class="pause">Pause</button></form>{{end}}</td>
</tr>{{else}}<tr><td colspan="6" class="muted">Nothing pending, nothing dead, nothing paused.</td></tr>{{end}}
</table>
<form method="post" action="pause" data-confirm="Pause this topic?"><input type="hidden" name="csrf" value="{{.Token}}">
<p>Pause another topic: <input name="topic" placeholder="exact topic" size="24"> <input name="reason" placeholder="reason" size="14"> <button>Pause</button></p></form>

{{if .Tenants}}<h2>Backlog per tenant</h2>
<table id="tenants">
<tr><th>Tenant</th><th>Pending</th><th>Oldest pending</th><th>Dead letters</th></tr>
{{range .Tenants}}<tr>
<td>{{if .Tenant}}<code>{{.Tenant}}</code>{{else}}<span class="muted">none</span>{{end}}</td><td class="n">{{.Pending}}</td><td class="n">{{age .OldestPendingAge}}</td><td class="n">{{.DeadLettered}}</td>
</tr>{{end}}
</table>{{end}}

<h2>Dead letters</h2>
<form method="get" action="./"><p>
Topic <input name="topic" value="{{.Topic}}" placeholder="shop.* or a name" size="18">
Key <input name="key" value="{{.Key}}" size="12">
Tenant <input name="tenant" value="{{.Tenant}}" size="12">
Error contains <input name="error" value="{{.Error}}" size="18">
<button>Filter</button> <a href="./">clear</a></p></form>
{{if .Dead}}<div>
<form method="post" action="retry" data-confirm="Retry every dead letter this filter selects (not only this page)?">
<input type="hidden" name="csrf" value="{{.Token}}">{{template "filter" .}}<button id="retry-all">Retry all matching</button></form>
<form method="post" action="discard" data-confirm="Delete every dead letter this filter selects (not only this page)? This cannot be undone.">
<input type="hidden" name="csrf" value="{{.Token}}">{{template "filter" .}}<button id="discard-all">Discard all matching</button></form>
</div>{{end}}
<table id="dead">
<tr><th>#</th><th>Event</th><th>Attempts</th><th>Dead since</th><th>Last error</th><th>Payload</th><th></th></tr>
{{range .Dead}}<tr id="ev-{{.ID}}">
<td class="n">{{.Sequence}}</td>
<td><code>{{.Topic}}</code>{{with .OrderingKey}}<br>key <code>{{.}}</code>{{end}}{{with .Tenant}}<br>tenant <code>{{.}}</code>{{end}}<br><span class="muted">{{.ID}}</span></td>
<td class="n">{{.Attempts}}</td><td>{{when .DeadLetteredAt}}</td>
<td><pre class="err">{{.LastError}}</pre></td>
<td><pre class="payload">{{pretty .Payload}}</pre></td>
<td><form method="post" action="retry" data-confirm="Retry event {{.Sequence}} ({{.Topic}})?">
<input type="hidden" name="csrf" value="{{$.Token}}"><input type="hidden" name="id" value="{{.ID}}">{{template "keep" $}}<button class="retry">Retry</button></form>
<form method="post" action="discard" data-confirm="Delete event {{.Sequence}} ({{.Topic}})? Its key's later events are released. This cannot be undone.">
<input type="hidden" name="csrf" value="{{$.Token}}"><input type="hidden" name="id" value="{{.ID}}">{{template "keep" $}}<button class="discard">Discard</button></form></td>
</tr>{{else}}<tr><td colspan="7" class="muted">No dead letters{{if or .Topic .Key .Tenant .Error}} match the filter{{end}}.</td></tr>{{end}}
</table>
{{if .Next}}<p><a id="next" href="?topic={{.Topic}}&amp;key={{.Key}}&amp;tenant={{.Tenant}}&amp;error={{.Error}}&amp;after={{.Next}}">Next page →</a></p>{{end}}
<script nonce="{{.Nonce}}">
document.querySelectorAll("form[data-confirm]").forEach(function (f) {
  f.addEventListener("submit", function (ev) {
    if (!window.confirm(f.dataset.confirm)) { ev.preventDefault(); }
  });
});
</script>
</body>
</html>
{{define "filter"}}<input type="hidden" name="topic" value="{{.Topic}}"><input type="hidden" name="key" value="{{.Key}}"><input type="hidden" name="tenant" value="{{.Tenant}}"><input type="hidden" name="error" value="{{.Error}}">{{template "keep" .}}{{end}}
{{define "keep"}}<input type="hidden" name="topic_filter" value="{{.Topic}}"><input type="hidden" name="key_filter" value="{{.Key}}"><input type="hidden" name="tenant_filter" value="{{.Tenant}}"><input type="hidden" name="error_filter" value="{{.Error}}">{{end}}
`
