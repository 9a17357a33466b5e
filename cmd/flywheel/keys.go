package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"flywheel/internal/store"
)

// keysCmd runs "flywheel keys create|list|revoke".
func keysCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: flywheel keys create --user NAME [--entity NAME] [--name LABEL] | list [--user NAME] | revoke ID|PREFIX")
		return errUsage
	}
	ctx := context.Background()
	var d dataFlags
	fs := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	d.register(fs)
	switch args[0] {
	case "create":
		user := fs.String("user", "", "user name (created with its personal entity if missing)")
		entity := fs.String("entity", "", "also make the user a member of this entity (created if missing)")
		name := fs.String("name", "", "a label for the key")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if *user == "" {
			fmt.Fprintln(stderr, "keys create: --user is required")
			return errUsage
		}
		st, err := d.open(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		if _, err := st.EnsureUser(ctx, *user); err != nil {
			return err
		}
		if *entity != "" {
			if err := st.AddMembership(ctx, *user, *entity); err != nil {
				return err
			}
		}
		_, key, err := st.CreateKey(ctx, *user, *name, "")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, key)
		return nil
	case "list":
		user := fs.String("user", "", "only this user's keys")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		st, err := d.open(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		keys, err := st.ListKeys(ctx, *user)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPREFIX\tUSER\tNAME\tCREATED\tREVOKED")
		for _, k := range keys {
			revoked := "-"
			if k.RevokedAt != nil {
				revoked = store.FormatTime(*k.RevokedAt)
			}
			name := k.Name
			if name == "" {
				name = "-"
			}
			fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.UserName, name, store.FormatTime(k.CreatedAt), revoked)
		}
		return tw.Flush()
	case "revoke":
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "usage: flywheel keys revoke [--data-dir D] ID|PREFIX")
			return errUsage
		}
		st, err := d.open(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		if err := st.RevokeKey(ctx, fs.Arg(0)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked %s\n", fs.Arg(0))
		return nil
	}
	fmt.Fprintf(stderr, "keys: unknown subcommand %q (create, list, revoke)\n", args[0])
	return errUsage
}
