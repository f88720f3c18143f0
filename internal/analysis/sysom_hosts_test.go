package analysis

import (
	"maps"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
)

// rankHosts feeds the engine's clock alignment: ranks on one host share
// a clock. Ranks without a host are left out (their clock is estimated).
func TestRankHosts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ranks []signal.Rank
		want  map[int]string
	}{
		{"none", nil, nil},
		{"no host named", []signal.Rank{{Rank: 0}, {Rank: 1}}, nil},
		{"some", []signal.Rank{{Rank: 0, Host: "a"}, {Rank: 1}, {Rank: 2, Host: "b"}}, map[int]string{0: "a", 2: "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rankHosts(&signal.Job{Ranks: tc.ranks})
			if !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("rankHosts = %v, want %v", got, tc.want)
			}
		})
	}
}
