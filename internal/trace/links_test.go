package trace

import (
	"fmt"
	"testing"

	"flywheel/internal/auth"
)

// TestChoiceLinks: a choice's fingerprint leads to the latest call of the
// caller's entities that sampled it, on both databases; another entity's
// call is never returned, and Projects lists only the caller's projects.
func TestChoiceLinks(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		ctx := t.Context()
		first, _ := e.start("alice", startReqMap(map[string]any{"project_id": "alice/p1"}))
		later, _ := e.start("alice", startReqMap(map[string]any{"project_id": "alice/p2"}))
		bobs, _ := e.start("bob", startReqMap(map[string]any{"project_id": "bob/p"}))
		if err := e.svc.LinkChoices(ctx, "alice/p1", first, []string{"fpA", "", "fpB"}); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.LinkChoices(ctx, "alice/p2", later, []string{"fpB"}); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.LinkChoices(ctx, "bob/p", bobs, []string{"fpA", "fpC"}); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.LinkChoices(ctx, "nobody/p", bobs, []string{"fpA"}); err == nil {
			t.Fatal("a link into a project that does not exist was accepted")
		}
		alice := &auth.Principal{Entities: []string{"alice"}}
		got, err := e.svc.ChoiceLinks(ctx, alice, []string{"fpA", "fpB", "fpC", "nope"})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]ChoiceLink{
			"fpA": {ProjectID: "alice/p1", CallID: first, ChoiceIndex: 0},
			"fpB": {ProjectID: "alice/p2", CallID: later, ChoiceIndex: 0}, // the latest call wins
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("alice's links = %v, want %v", got, want)
		}
		bob := &auth.Principal{Entities: []string{"bob"}}
		if got, _ := e.svc.ChoiceLinks(ctx, bob, []string{"fpB"}); len(got) != 0 {
			t.Fatalf("bob sees alice's link: %v", got)
		}
		projects, err := e.svc.Projects(ctx, []string{"alice"}, 10)
		if err != nil || fmt.Sprint(projects) != "[alice/p1 alice/p2]" {
			t.Fatalf("alice's projects = %v, %v", projects, err)
		}
	})
}
