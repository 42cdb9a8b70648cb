package auth

import (
	"bytes"
	"html/template"
	"net/http"
)

// scopeText says in words what each capability allows, for the consent page.
var scopeText = map[string]string{
	"bap:tasks.read":        "See your tasks and their history",
	"bap:tasks.write":       "Create, cancel, resume and close tasks",
	"bap:browser.observe":   "Look at pages the browser shows for your tasks",
	"bap:browser.act":       "Act in the browser for your tasks (navigate, click, type)",
	"bap:approvals.request": "Ask for approvals",
	"bap:approvals.resolve": "Approve or deny held actions",
	"bap:artifacts.read":    "Read evidence (screenshots, snapshots)",
	"bap:events.read":       "Follow task events",
	"bap:secrets.read":      "See the names of the secrets your tasks may use (never their values)",
	"bap:secrets.write":     "Store, rotate and delete secrets (passwords the browser types by reference)",
}

type hiddenField struct{ Name, Value string }

type loginPage struct {
	Client   string
	Scopes   []string
	Hidden   []hiddenField
	Username string
	Error    string
}

var loginTemplate = template.Must(template.New("login").Funcs(template.FuncMap{
	"describe": func(s string) string {
		if t, ok := scopeText[s]; ok {
			return t
		}
		return s
	},
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in — BAP</title>
<style>
body{font:16px/1.5 system-ui,sans-serif;margin:0;background:#f6f6f6;color:#111}
main{max-width:28rem;margin:3rem auto;background:#fff;padding:1.5rem 2rem;border:1px solid #ccc;border-radius:8px}
label{display:block;font-weight:600;margin-top:1rem}
input[type=text],input[type=password]{width:100%;box-sizing:border-box;padding:.5rem;font-size:1rem;border:1px solid #555;border-radius:4px}
.error{background:#fde8e8;border:1px solid #a00;color:#600;padding:.5rem;border-radius:4px}
.buttons{margin-top:1.5rem;display:flex;gap:1rem}
button{font-size:1rem;padding:.5rem 1.25rem;border-radius:4px;border:1px solid #333;cursor:pointer}
button[value=allow]{background:#0b57d0;color:#fff;border-color:#0b57d0}
:focus-visible{outline:3px solid #e8a200;outline-offset:2px}
</style>
</head>
<body>
<main>
<h1>Sign in to BAP</h1>
{{if .Error}}<p class="error" role="alert" id="error">{{.Error}}</p>{{end}}
<form method="post" action="/oauth2/auth">
{{range .Hidden}}<input type="hidden" name="{{.Name}}" value="{{.Value}}">
{{end}}<p><strong>{{.Client}}</strong> asks for access to your BAP account. It will be able to:</p>
<ul>
{{range .Scopes}}<li>{{describe .}} <code>{{.}}</code></li>
{{else}}<li>Nothing beyond knowing who you are</li>
{{end}}</ul>
<label for="username">Name</label>
<input type="text" id="username" name="username" value="{{.Username}}" autocomplete="username" required{{if .Error}} aria-describedby="error"{{end}} autofocus>
<label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required>
<div class="buttons">
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny" formnovalidate>Deny</button>
</div>
</form>
</main>
</body>
</html>
`))

func (s *Server) renderLogin(w http.ResponseWriter, status int, p loginPage) {
	var buf bytes.Buffer
	if err := loginTemplate.Execute(&buf, p); err != nil {
		http.Error(w, "the sign-in page could not be rendered", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
