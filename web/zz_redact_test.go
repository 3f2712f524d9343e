package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestZZProbeRedactInPage(t *testing.T) {
	srv := startServer(t)
	gh := "ghp_" + strings.Repeat("A1b2", 9)
	sk := "sk-" + strings.Repeat("Zq9", 12)
	pw := "hunter2hunter2"
	out := srv.cli("open", "--title", "deploy with "+gh, "--text", "first "+sk)
	var opened struct{ Link, Thread string }
	json.Unmarshal(out, &opened)
	_, token, _ := strings.Cut(opened.Link, "#t=")
	thread := opened.Thread
	srv.reply(thread, "db at https://admin:"+pw+"@db.example.invalid/x and DB_PASSWORD="+pw)
	srv.ask(thread, "--approval", "use "+gh+"?", "--title", "t "+sk, "--detail", "password="+pw, "--detail", "token_url=https://u:"+pw+"@h.invalid", "--timeout", "15m")
	srv.ask(thread, "--input", "pick", "--choice", sk, "--choice", "other", "--timeout", "15m")
	card, _ := json.Marshal(map[string]any{"title": "c " + gh, "fallback_text": "fb " + sk, "blocks": []any{
		map[string]any{"type": "fields", "fields": []any{map[string]any{"label": "Client Secret", "value": pw}, map[string]any{"label": "x", "value": gh}}},
		map[string]any{"type": "link", "url": "https://admin:" + pw + "@h.invalid/?token=" + pw, "label": "link " + sk},
		map[string]any{"type": "code", "text": "export GITHUB_TOKEN=" + pw},
	}})
	if o, e, err := srv.cliRun(card, "card", thread, "-"); err != nil {
		t.Fatalf("card: %s %s", o, e)
	}
	aid := attach(t, srv.URL, token, "creds-"+gh+".txt", "text/plain", []byte("x"))
	callAPI(t, http.MethodPost, srv.URL+"api/chat/post", "X-Chat-Token", token, map[string]any{"text": "", "attachments": []string{aid}})
	msgs := poll2(t, srv.URL, token)
	callAPI(t, http.MethodPost, srv.URL+"api/chat/react", "X-Chat-Token", token, map[string]any{"message_id": msgs[0].ID, "emoji": gh})
	inv := invite(t, srv.URL, token, map[string]any{"name": "Sam", "role": "viewer"})

	p := newWindow(t)
	p.open(inv.Link)
	p.waitState(live, "ws")
	p.waitJS(soon, "all", `document.querySelectorAll("#log li").length >= 6`)
	// What is drawn after the messages: the file's chip with its own
	// ticket (asked for once the chip is drawn) and the reaction.
	p.waitJS(soon, "the chip's ticket and the reaction", `!!document.querySelector('#log a.chip[href*="ticket="]') && !!document.querySelector("#log .reactions .react")`)
	html := eval[string](p, `document.documentElement.outerHTML + " TITLE " + document.title`)
	for _, s := range []string{gh, sk, pw} {
		if i := strings.Index(html, s); i >= 0 {
			t.Errorf("participant page shows %s: …%s…", s, html[max(0, i-120):min(len(html), i+60)])
		}
	}
	t.Logf("title: %s", eval[string](p, `document.title + " | " + document.getElementById("thread-id").textContent`))
}
