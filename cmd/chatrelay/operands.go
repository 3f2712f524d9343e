package main

import (
	"fmt"
	"strings"
)

// form is one form of a command's operands: its verb ("list", "revoke";
// "" for the form that names none, as "share THREAD"), how many operands
// follow the verb, and how a usage error names them ("THREAD and ID").
type form struct {
	verb string
	n    int
	what string
}

// parse parses e's arguments into e.fs (see parse).
func (e cmdEnv) parse() error { return parse(e.fs, e.args, e.getenv) }

// parseForm parses e's arguments into e.fs and reads which of forms they
// take: the form whose verb the first operand names, else the one
// without a verb. It checks the number of operands that follow the verb,
// and returns the verb and those operands.
func (e cmdEnv) parseForm(forms ...form) (verb string, args []string, err error) {
	if err := e.parse(); err != nil {
		return "", nil, err
	}
	return readForm(e.fs.Name(), e.fs.Args(), forms)
}

// readForm is parseForm after the flags: cmd is the command's name, args
// its operands.
func readForm(cmd string, args []string, forms []form) (string, []string, error) {
	var f *form
	var verbs []string
	for i := range forms {
		if v := forms[i].verb; v == "" {
			f = &forms[i]
		} else if verbs = append(verbs, v); len(args) > 0 && args[0] == v {
			f, args = &forms[i], args[1:]
			break
		}
	}
	if f == nil {
		list := strings.Join(verbs, ", ")
		if i := strings.LastIndex(list, ", "); i >= 0 {
			list = list[:i] + " or " + list[i+2:]
		}
		if len(args) == 0 {
			return "", nil, usageError(fmt.Sprintf("%s needs %s", cmd, list))
		}
		return "", nil, usageError(fmt.Sprintf("%s: unknown %q: %s", cmd, args[0], list))
	}
	if len(args) != f.n {
		return "", nil, usageError(strings.TrimSpace(fmt.Sprintf("%s %s", cmd, f.verb)) + " takes " + f.what)
	}
	return f.verb, args, nil
}
