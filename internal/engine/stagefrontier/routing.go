package stagefrontier

import "slices"

// routed is one stage ranking: shares, the candidate set and top-1/top-2.
type routed struct {
	Share   []float64 // nil when the scores sum to zero
	Order   []int     // stage indices with positive score, best first
	Routing []string
	Top1    string
	Top2    []string
}

// route ranks stages by score and takes the smallest leading-share prefix
// whose cumulative share reaches tau (StageFrontier §4). Ties are broken by
// stage order so the result is deterministic. The frontier and every §6.2
// baseline go through this one function, so the comparison isolates the
// scoring rule (§6.2: "sharing windowing, schema validation, and tie
// tolerance").
func route(names []string, score []float64, tau float64) routed {
	var out routed
	total := 0.0
	for i, x := range score {
		if x > 0 {
			total += x
			out.Order = append(out.Order, i)
		}
	}
	out.Routing, out.Top2 = []string{}, []string{}
	if total <= 0 {
		return out
	}
	out.Share = make([]float64, len(score))
	for i, x := range score {
		out.Share[i] = max(x, 0) / total
	}
	slices.SortStableFunc(out.Order, func(a, b int) int {
		switch {
		case score[a] > score[b]:
			return -1
		case score[a] < score[b]:
			return 1
		}
		return 0
	})
	cum := 0.0
	for _, i := range out.Order {
		out.Routing = append(out.Routing, names[i])
		cum += out.Share[i]
		if cum >= tau-1e-12 {
			break
		}
	}
	out.Top1 = names[out.Order[0]]
	for _, i := range out.Order[:min(2, len(out.Order))] {
		out.Top2 = append(out.Top2, names[i])
	}
	return out
}
