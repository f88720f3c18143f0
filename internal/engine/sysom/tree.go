package sysom

import (
	"cmp"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// Node is a flame-graph node (contract §5). In a FlameTree, A is the
// inclusive sample count and Self the samples whose stack ends here; in a
// DiffTree, A and B are the two profiles' inclusive counts and Self and
// SelfB their self counts. Children are sorted by name, module, kind.
type Node struct {
	Name     string     `json:"name"`
	Kind     stack.Kind `json:"kind"`
	Module   string     `json:"module,omitempty"`
	A        int64      `json:"a"`
	B        int64      `json:"b"`
	Self     int64      `json:"self"`
	SelfB    int64      `json:"self_b,omitempty"`
	Children []*Node    `json:"children,omitempty"`
}

// RootName names the synthetic root of every tree.
const RootName = "root"

// FlameTree aggregates p's stacks into a tree: the root's A is p.Total,
// and each node's A is its Self plus its children's A. A nil or invalid
// profile gives an empty root (callers validate with ValidateProfile).
func FlameTree(p *stack.Profile) *Node {
	t := newTreeBuilder(newInterner())
	if ValidateProfile(p) == nil {
		t.add(p, 0)
	}
	return t.build()
}

// DiffTree aggregates a and b into one tree keyed by function (name,
// kind, module) along the path from the root: each node holds both
// profiles' counts (§3.1 differential flame graph). The root's A and B
// are the totals. Nil or invalid profiles count as empty.
func DiffTree(a, b *stack.Profile) *Node {
	t := newTreeBuilder(newInterner())
	if ValidateProfile(a) == nil {
		t.add(a, 0)
	}
	if ValidateProfile(b) == nil {
		t.add(b, 1)
	}
	return t.build()
}

// treeBuilder merges profiles into one tree. Rather than a hash map of
// (parent, function) → child probed once per frame, it sorts the stacks
// (as sequences of functions in name order) and builds the tree in one
// pass: stacks sharing a prefix are adjacent, so each node is created
// exactly once, when its prefix first appears, and children come out in
// their final (name) order. Cost: one sort of the stacks plus one step
// per frame not shared with the previous stack.
type treeBuilder struct {
	in    *interner
	profs [2][]*stack.Profile
}

func newTreeBuilder(in *interner) *treeBuilder { return &treeBuilder{in: in} }

// add queues a valid profile on side 0 (A) or 1 (B).
func (t *treeBuilder) add(p *stack.Profile, side int) { t.profs[side] = append(t.profs[side], p) }

type stackRef struct {
	key   []int32 // functions, root first, as positions in name order
	side  int32
	count int64
}

func (t *treeBuilder) build() *Node {
	var gids [2][][]int32
	frames, stacks := 0, 0
	for side := range 2 {
		for _, p := range t.profs[side] {
			gids[side] = append(gids[side], t.in.table(p.Funcs))
			stacks += len(p.Stacks)
			for i := range p.Stacks {
				frames += len(p.Stacks[i].Frames)
			}
		}
	}
	// Name order of every interned function: sorting stacks by it puts
	// siblings in their final order.
	funcs := t.in.funcs
	order := make([]int32, len(funcs))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		x, y := &funcs[a], &funcs[b]
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.Module, y.Module), cmp.Compare(x.Kind, y.Kind))
	})
	pos := make([]int32, len(funcs))
	for i, g := range order {
		pos[g] = int32(i)
	}
	buf := make([]int32, frames)
	refs := make([]stackRef, 0, stacks)
	o := 0
	for side := range 2 {
		for pi, p := range t.profs[side] {
			gid := gids[side][pi]
			for i := range p.Stacks {
				st := &p.Stacks[i]
				k := buf[o : o+len(st.Frames) : o+len(st.Frames)]
				o += len(st.Frames)
				for j, f := range st.Frames {
					k[j] = pos[gid[f]]
				}
				refs = append(refs, stackRef{k, int32(side), st.Count})
			}
		}
	}
	slices.SortFunc(refs, func(a, b stackRef) int { return slices.Compare(a.key, b.key) })

	// Count the nodes first (each stack adds the frames it does not
	// share with its predecessor) so the arrays never grow.
	common := func(a, b []int32) int {
		k := 0
		for k < len(a) && k < len(b) && a[k] == b[k] {
			k++
		}
		return k
	}
	total := 1
	var prev []int32
	for _, r := range refs {
		total += len(r.key) - common(prev, r.key)
		prev = r.key
	}
	// One pass: path holds the nodes of the previous stack's prefix.
	fn := append(make([]int32, 0, total), -1)
	parent := append(make([]int32, 0, total), -1)
	self := [2][]int64{make([]int64, total), make([]int64, total)}
	var path []int32
	prev = nil
	for _, r := range refs {
		k := common(prev, r.key)
		path = path[:k]
		for j := k; j < len(r.key); j++ {
			par := int32(0)
			if j > 0 {
				par = path[j-1]
			}
			path = append(path, int32(len(fn)))
			fn = append(fn, r.key[j])
			parent = append(parent, par)
		}
		leaf := int32(0)
		if len(r.key) > 0 {
			leaf = path[len(r.key)-1]
		}
		self[r.side][leaf] += r.count
		prev = r.key
	}

	n := len(fn)
	nodes := make([]Node, n)
	kids := make([]int32, n)
	for i := n - 1; i >= 0; i-- {
		nd := &nodes[i]
		nd.Self, nd.SelfB = self[0][i], self[1][i]
		nd.A += nd.Self
		nd.B += nd.SelfB
		if i > 0 {
			// Nodes are created in preorder: a parent precedes its
			// children, so this reverse pass sees each node complete.
			p := &nodes[parent[i]]
			p.A += nd.A
			p.B += nd.B
			kids[parent[i]]++
			f := &funcs[order[fn[i]]]
			nd.Name, nd.Kind, nd.Module = f.Name, f.Kind, f.Module
		}
	}
	nodes[0].Name, nodes[0].Kind = RootName, stack.Symbol
	ptrs := make([]*Node, n)
	off := 0
	for i := range nodes {
		if k := int(kids[i]); k > 0 {
			nodes[i].Children = ptrs[off : off : off+k]
			off += k
		}
	}
	// Preorder creation with sorted stacks appends each node's children
	// in name order.
	for i := 1; i < n; i++ {
		p := &nodes[parent[i]]
		p.Children = append(p.Children, &nodes[i])
	}
	return &nodes[0]
}

func compareNodes(a, b *Node) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Module, b.Module), cmp.Compare(a.Kind, b.Kind))
}

// Walk calls fn for every node in depth-first order with its path from
// the root (the root excluded from path); fn returns false to skip the
// node's children.
func (n *Node) Walk(fn func(n *Node, path []*Node) bool) {
	var rec func(n *Node, path []*Node)
	rec = func(n *Node, path []*Node) {
		if !fn(n, path) {
			return
		}
		path = append(path, n)
		for _, c := range n.Children {
			rec(c, path)
		}
	}
	for _, c := range n.Children {
		rec(c, nil)
	}
}
