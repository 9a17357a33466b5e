package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"flywheel/internal/trace"
)

const pricesUsage = "usage: flywheel prices set --model M --prompt COST --completion COST [--effective RFC3339] [--provider P] | prices load FILE | prices list"

// pricesCmd runs `flywheel prices ...` against the data dir's database:
// --data-dir / --database come first, then the subcommand (runPrices).
func pricesCmd(args []string, stdout, stderr io.Writer) error {
	var d dataFlags
	fs := flag.NewFlagSet("prices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx := context.Background()
	st, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	return runPrices(ctx, fs.Args(), st.DB(), stdout)
}

// runPrices runs a `flywheel prices` subcommand on the call store of db
// (trace.New migrates it first; PostgreSQL when db is over pgx's
// database/sql driver, else SQLite):
//
//	prices set --model M --prompt 3e-05 --completion 6e-05 [--effective RFC3339] [--provider P]
//	prices load FILE
//	prices list
//
// A server running on the same database sees the change within a second.
func runPrices(ctx context.Context, args []string, db *sql.DB, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(pricesUsage)
	}
	svc, err := trace.New(db, trace.Options{})
	if err != nil {
		return err
	}
	switch args[0] {
	case "set":
		fs := flag.NewFlagSet("prices set", flag.ContinueOnError)
		fs.SetOutput(stdout)
		model := fs.String("model", "", "model id (a key of summary.usage)")
		prompt := fs.Float64("prompt", -1, "USD per prompt token")
		completion := fs.Float64("completion", -1, "USD per completion token")
		effective := fs.String("effective", "", "RFC 3339 time the price takes effect (default now)")
		provider := fs.String("provider", "default", "provider id")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *model == "" || *prompt < 0 || *completion < 0 {
			return errors.New("prices set: --model, --prompt and --completion are required (costs >= 0)\n" + pricesUsage)
		}
		eff := time.Now()
		if *effective != "" {
			var ok bool
			if eff, ok = trace.ParseTime(*effective); !ok {
				return fmt.Errorf("prices set: invalid --effective %q: expected RFC 3339", *effective)
			}
		}
		if err := svc.SetProviderPrice(ctx, *provider, *model, *prompt, *completion, eff); err != nil {
			return err
		}
		p := trace.Price{PromptTokenCost: *prompt, CompletionTokenCost: *completion, EffectiveDate: eff.UnixMicro()}
		pc, cc, et := p.Text()
		fmt.Fprintf(stdout, "set default price for %s: prompt %s, completion %s USD/token, effective %s\n", *model, pc, cc, et)
		return nil
	case "load":
		if len(args) != 2 {
			return errors.New(pricesUsage)
		}
		n, err := svc.LoadPricesFile(ctx, args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "loaded %d default prices from %s\n", n, args[1])
		return nil
	case "list":
		prices, err := trace.DefaultPrices(ctx, db)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MODEL\tPROMPT\tCOMPLETION\tUNIT\tPROVIDER\tEFFECTIVE\tID")
		for _, p := range prices {
			pc, cc, et := p.Text()
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.LLMID, pc, cc, p.PromptTokenCostUnit, p.ProviderID, et, p.ID)
		}
		return tw.Flush()
	}
	return fmt.Errorf("prices: unknown subcommand %q\n%s", args[0], pricesUsage)
}
