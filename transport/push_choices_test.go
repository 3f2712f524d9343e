package transport_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
)

// TestPushChoiceValuesWhole: the worker answers an input's choice
// (a notification's action) with the value its push carries, so a push
// never carries a cut one. A long input whose payload must be cut keeps
// its choices' values whole (its prompt and labels cut); one whose
// values cannot fit whole carries no choices (so no action), its prompt
// still shown. Before, the values were cut with "…" like any string: the
// action's answer was refused (400 invalid_answer), or, with allow_text,
// stored as a text that is no choice.
func TestPushChoiceValuesWhole(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	e := startPush(t, pushOptions{config: withPush(svc, nil)})
	owner, thread := tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	status, a := e.subscribe(owner, nil, svc.Subscribe(t, "phone"))
	assert.Equal(t, "subscribe "+a.Code, status, 201)

	long := strings.Repeat("区", 196)
	two := []chatrelay.Choice{
		{Value: "eu-1" + long, Label: strings.Repeat("区", 120), Description: strings.Repeat("区", 300)},
		{Value: "us-1" + long, Label: strings.Repeat("区", 120), Description: strings.Repeat("区", 300)},
	}
	var twelve []chatrelay.Choice
	for i := range 12 {
		twelve = append(twelve, chatrelay.Choice{Value: string(rune('a'+i)) + strings.Repeat("\x01", 199)})
	}
	for i, c := range []struct {
		choices []chatrelay.Choice
		carried int
	}{{two, 2}, {twelve, 0}} {
		_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
			Ask: &chatrelay.Ask{Type: chatrelay.Input, Title: "which", Prompt: "Which region? " + strings.Repeat("区", 3900), Choices: c.choices, AllowText: true, Timeout: 10 * time.Minute}})
		assert.Success(t, err)
		_, pls := awaitPushes(t, svc, "/push/phone", i+1)
		ix := pls[i].Message.Interaction
		assert.Equal(t, "choices carried", len(ix.Choices), c.carried)
		for k, ch := range ix.Choices {
			assert.Equal(t, "a carried choice's value", ch.Value, c.choices[k].Value)
		}
		assert.True(t, strings.HasPrefix(ix.Prompt, "Which region? "), "the prompt carried: %.40q", ix.Prompt)
	}
}
