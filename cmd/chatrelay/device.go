package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
)

// device is the host's side of the owner's devices (contract Part 5),
// built as share is:
//
//	chatrelay device THREAD --name NAME [--expires-in D] [--public-url URL] [--json]
//	chatrelay device list THREAD [--json]
//	chatrelay device revoke THREAD ID
//
// It writes through the same store and locks as the server: a revoke here
// ends the device's streams on a running server within a second.
func device(ctx context.Context, e cmdEnv) error {
	var f deviceFlags
	f.register(e.fs)
	verb, args, err := e.parseForm(form{"", 1, "THREAD --name NAME"}, form{"list", 1, "THREAD"}, form{"revoke", 2, "THREAD and ID"})
	if err != nil {
		return err
	}
	if verb != "" && (given(e.fs, "name") || given(e.fs, "expires-in")) {
		return usageError("--name and --expires-in are for making a device: chatrelay device THREAD --name NAME")
	}
	thread := args[0]
	st, people, err := openParticipants(ctx, &f.store, thread, "devices")
	if err != nil {
		return err
	}
	defer st.Close()
	switch verb {
	case "list":
		return deviceList(ctx, e, people, thread, *f.asJSON)
	case "revoke":
		d, err := people.RevokeDevice(ctx, thread, args[1], host.Caller{})
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "revoked %s (%s)\n", oneLine(d.Name), d.ID)
		return nil
	}
	return deviceIssue(ctx, e, people, thread, f, st.Settings.PublicURL)
}

// deviceFlags are the flags of chatrelay device.
type deviceFlags struct {
	store                 storeFlags
	name, expires, pubURL *string
	asJSON                *bool
}

func (f *deviceFlags) register(fs *flag.FlagSet) {
	f.store.register(fs, true)
	f.store.existing = true // a link is into a thread that has a message
	f.name = fs.String("name", "", fmt.Sprintf("make: the device's `name` (cleaned as a participant's: at most %d characters)", chatrelay.LimitName.Max))
	f.expires = fs.String("expires-in", formatDays(chatrelay.DefaultDeviceExpiresIn), "make: how long the device's link lives, "+spanOf(chatrelay.LimitDeviceExpiresIn)+" (`D`: 12h, 30d)")
	f.pubURL = fs.String("public-url", "", "make: the server's public `URL` for the link (default: what the folder's server records with serve --public-url)")
	f.asJSON = fs.Bool("json", false, "make, list: one JSON object instead of text")
}

// deviceList prints the thread's devices.
func deviceList(ctx context.Context, e cmdEnv, people *host.Participants, thread string, asJSON bool) error {
	ds, err := people.Devices(ctx, thread)
	return printThreadList(e, thread, "devices", asJSON, ds, err, func(w io.Writer, ds []chatrelay.Device) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DEVICE\tSTATE\tLAST SEEN (UTC)\tEXPIRES (UTC)")
		for _, d := range ds {
			seen := "never"
			if d.LastSeen != 0 {
				seen = utc(d.LastSeen)
			}
			fmt.Fprintf(tw, "%s (%s)\t%s\t%s\t%s\n", oneLine(d.Name), d.ID, d.State, seen, utc(d.ExpiresAt))
		}
		return tw.Flush()
	})
}

// deviceIssue makes a device and prints its link, shown this once. The
// link's base is --public-url, else recorded (what the folder's server
// records).
func deviceIssue(ctx context.Context, e cmdEnv, people *host.Participants, thread string, f deviceFlags, recorded string) error {
	d, err := parseDays(*f.expires)
	if err != nil {
		return usageError("--expires-in " + err.Error())
	}
	if d == 0 { // 0 would read as the default
		return chatrelay.Errorf(chatrelay.InvalidExpiry, "--expires-in is %s", spanOf(chatrelay.LimitDeviceExpiresIn))
	}
	in := chatrelay.DeviceRequest{Name: *f.name, ExpiresIn: d}
	if err := in.Check(); err != nil {
		return err
	}
	base, err := linkBase(*f.pubURL, recorded)
	if err != nil {
		return err
	}
	is, err := people.IssueDevice(ctx, thread, in, base, host.Caller{})
	if err != nil {
		return err
	}
	if *f.asJSON {
		printJSON(e.stdout, map[string]any{"device": is.Device, "token": is.Token, "link": is.Link})
	} else {
		fmt.Fprintf(e.stdout, "Made device %s (%s), until %s. Open this link on the device; it is shown this once:\n\n  %s\n",
			is.Device.Name, is.Device.ID, utc(is.Device.ExpiresAt), is.Link)
		printLinkEnd(e.stdout, base, is.Link)
	}
	return unseenLink(e.stdout, "device", thread, is.Device.ID)
}
