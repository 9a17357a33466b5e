package rl

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestReadTrainedPage: a page read by streaming equals the slice of the
// whole file, at every offset and limit, with unknown keys skipped; a
// malformed file is an error.
func TestReadTrainedPage(t *testing.T) {
	var all Trained
	all.JobID = "job-1"
	for i := range 7 {
		all.Trajectories = append(all.Trajectories, TrainedTrajectory{Group: i / 3, Reward: float64(i),
			Messages: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"role":"user","content":"m%d"}`, i))}})
	}
	b, _ := json.Marshal(all)
	file := `{"extra": {"x": [1, 2]}, ` + string(b[1:])
	for offset := 0; offset <= 8; offset++ {
		for _, limit := range []int{1, 3, 7, 100} {
			id, page, total, err := ReadTrainedPage(strings.NewReader(file), offset, limit)
			if err != nil {
				t.Fatal(err)
			}
			want := all.Trajectories[min(offset, 7):min(offset+limit, 7)]
			if id != "job-1" || total != 7 || fmt.Sprint(page) != fmt.Sprint(want) && len(want) > 0 || len(page) != len(want) {
				t.Fatalf("offset %d limit %d: %s %d %v, want %v", offset, limit, id, total, page, want)
			}
		}
	}
	for _, bad := range []string{``, `[]`, `{"trajectories": {}}`, `{"trajectories": [1, }`, `{"job_id": 3}`} {
		if _, _, _, err := ReadTrainedPage(strings.NewReader(bad), 0, 10); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
