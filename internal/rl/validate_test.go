package rl_test

import (
	"testing"

	"flywheel/internal/rl"
)

// TestCompactTrajectory: ART 0.5.18+ serialise trajectories and groups
// without the fields equal to their defaults (pydantic's exclude_defaults):
// a zero reward is absent, as are empty tools, metrics, metadata, logs and
// a group's exceptions. Such a body is valid, and the reward is 0. This is
// the shape of a group ART 0.5.23's ServerlessBackend.train posts.
func TestCompactTrajectory(t *testing.T) {
	body := `{"model_id": "m", "trajectory_groups": [{"trajectories": [
		{"messages_and_choices": [{"role": "user", "content": "hi"},
			{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "yo"},
			 "logprobs": {"content": [{"token": "token_id:7", "logprob": -0.25}]}}]},
		{"messages_and_choices": [{"role": "user", "content": "hi"},
			{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ee"}}], "reward": 1.0}]}],
		"experimental_config": {"loss_fn": "cispo"}}`
	sum, err := rl.Validate([]byte(body))
	if err != nil || sum.Trajectories != 2 {
		t.Fatalf("Validate: %+v, %v", sum, err)
	}
	req, err := rl.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got := []float64{req.TrajectoryGroups[0].Trajectories[0].Reward, req.TrajectoryGroups[0].Trajectories[1].Reward}; got[0] != 0 || got[1] != 1 {
		t.Fatalf("rewards %v, want [0 1]", got)
	}
	// A reward that is there must still be a finite number.
	for _, bad := range []string{`"reward": null`, `"reward": "0"`, `"reward": 1e999`} {
		b := `{"model_id": "m", "trajectory_groups": [{"trajectories": [{` + bad + `, "messages_and_choices": []}]}]}`
		if _, err := rl.Validate([]byte(b)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
