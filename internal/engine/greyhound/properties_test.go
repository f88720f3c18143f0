package greyhound

import (
	"math/rand/v2"
	"testing"
)

func checkDisjoint(t *testing.T, what string, passes [][]Link) {
	t.Helper()
	for i, p := range passes {
		used := map[int]bool{}
		for _, l := range p {
			if used[l.Src] || used[l.Dst] || l.Src == l.Dst {
				t.Fatalf("%s pass %d: rank in two transfers: %v", what, i, p)
			}
			used[l.Src], used[l.Dst] = true, true
		}
	}
}

// Fig. 10 ring: every ring link (i → i+1) is covered exactly once, in 2
// passes for even sizes and 3 for odd, and no rank is in two transfers of
// one pass.
func TestFig10RingCoversEveryLinkOnce(t *testing.T) {
	for n := 2; n <= 64; n++ {
		ranks := rand.New(rand.NewPCG(uint64(n), 0)).Perm(1000)[:n]
		passes := RingPasses(ranks)
		want := 2
		if n%2 == 1 {
			want = 3
		}
		if len(passes) != want {
			t.Fatalf("n=%d: %d passes, want %d", n, len(passes), want)
		}
		checkDisjoint(t, "ring", passes)
		seen := map[Link]int{}
		for _, p := range passes {
			for _, l := range p {
				seen[l]++
			}
		}
		for i := range n {
			if l := (Link{ranks[i], ranks[(i+1)%n]}); seen[l] != 1 {
				t.Fatalf("n=%d: link %v covered %d times", n, l, seen[l])
			}
		}
		if len(seen) != n {
			t.Fatalf("n=%d: %d links, want %d", n, len(seen), n)
		}
	}
}

// Fig. 10 tree: a binary tree rooted at position 0 (one child), every
// child → parent edge covered exactly once in at most four passes.
func TestFig10TreeCoversEveryEdgeInFourPasses(t *testing.T) {
	for n := 2; n <= 130; n++ {
		children := make([]int, n)
		for r := 1; r < n; r++ {
			p := TreeParent(r, n)
			if p < 0 || p >= n || p == r {
				t.Fatalf("n=%d: parent(%d)=%d", n, r, p)
			}
			children[p]++
			// reaches the root without cycles
			q, steps := r, 0
			for q != 0 {
				q = TreeParent(q, n)
				if steps++; steps > n {
					t.Fatalf("n=%d: cycle from %d", n, r)
				}
			}
		}
		if children[0] != 1 {
			t.Fatalf("n=%d: root has %d children", n, children[0])
		}
		for r, c := range children {
			if c > 2 {
				t.Fatalf("n=%d: node %d has %d children", n, r, c)
			}
		}
		ranks := make([]int, n)
		for i := range ranks {
			ranks[i] = 100 + i
		}
		passes := TreePasses(ranks)
		if len(passes) != 4 {
			t.Fatalf("n=%d: %d passes", n, len(passes))
		}
		checkDisjoint(t, "tree", passes)
		seen := map[Link]int{}
		for _, p := range passes {
			for _, l := range p {
				seen[l]++
			}
		}
		for r := 1; r < n; r++ {
			if l := (Link{ranks[r], ranks[TreeParent(r, n)]}); seen[l] != 1 {
				t.Fatalf("n=%d: edge %v covered %d times", n, l, seen[l])
			}
		}
	}
}

// The merged plan keeps passes disjoint and covers every group's links.
func TestPlanValidationMergesDisjointGroups(t *testing.T) {
	cfg := DefaultConfig()
	sus := []Group{{Comm: "dp0", Ranks: []int{0, 4}}, {Comm: "dp3", Ranks: []int{3, 7}}, {Comm: "tp0", Ranks: []int{0, 1, 2, 3}}}
	p := PlanValidation(sus, cfg)
	checkDisjoint(t, "plan", p.P2P.Passes)
	seen := map[Link]bool{}
	for _, pass := range p.P2P.Passes {
		for _, l := range pass {
			seen[l] = true
		}
	}
	for _, g := range sus {
		for _, ps := range [][][]Link{RingPasses(g.Ranks), TreePasses(g.Ranks)} {
			for _, pass := range ps {
				for _, l := range pass {
					if !seen[l] {
						t.Errorf("link %v of %s not planned", l, g.Comm)
					}
				}
			}
		}
	}
	if len(p.GEMM.Ranks) != 6 || len(p.P2P.SizesBytes) != 3 || p.P2P.SizesBytes[0] != 16<<20 || p.P2P.Reps != 3 {
		t.Errorf("plan %+v", p)
	}
	if len(p.P2P.Passes) > 8 {
		t.Errorf("%d passes for three small groups", len(p.P2P.Passes))
	}
}
