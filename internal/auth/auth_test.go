package auth

import (
	"context"
	"testing"
)

func TestPrincipalInContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("empty context has a principal")
	}
	if _, ok := FromContext(WithPrincipal(context.Background(), nil)); ok {
		t.Fatal("a nil principal counts as present")
	}
	p := &Principal{UserID: "u1", UserName: "alice", PersonalEntity: "alice", Entities: []string{"alice", "team"}}
	got, ok := FromContext(WithPrincipal(context.Background(), p))
	if !ok || got != p {
		t.Fatalf("got %v %v", got, ok)
	}
	if !got.Member("team") || !got.Member("alice") || got.Member("bob") || got.Member("") {
		t.Fatal("Member answers wrongly")
	}
	var none *Principal
	if none.Member("alice") {
		t.Fatal("nil principal is a member")
	}
}
