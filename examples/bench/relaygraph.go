package main

import "slices"

// The caches of the relays phase and of the hierarchies it computes
// figures for, as graphs of who peers with whom.

// peerGraph says who peers with whom: each cache's peers (both ways).
type peerGraph map[string][]string

// graphOf is the graph of the given edges.
func graphOf(edges ...[2]string) peerGraph {
	g := peerGraph{}
	for _, e := range edges {
		g[e[0]] = append(g[e[0]], e[1])
		g[e[1]] = append(g[e[1]], e[0])
	}
	for _, peers := range g {
		slices.Sort(peers)
	}
	return g
}

// chainOf peers each cache with the one before and the one after it.
func chainOf(names ...string) peerGraph {
	var edges [][2]string
	for i := 1; i < len(names); i++ {
		edges = append(edges, [2]string{names[i-1], names[i]})
	}
	return graphOf(edges...)
}

// fullMeshOf peers every cache with every other.
func fullMeshOf(names ...string) peerGraph {
	var edges [][2]string
	for i := range names {
		for j := i + 1; j < len(names); j++ {
			edges = append(edges, [2]string{names[i], names[j]})
		}
	}
	return graphOf(edges...)
}

// relayTree is the tree of TestRelayTreeOfTwoLevels
// (cache/server/integration/regions_relay_test.go): a global cache, two
// regions peering with it, two zones peering with each region.
func relayTree() (peerGraph, []string) {
	g := graphOf(
		[2]string{"global", "region-a"}, [2]string{"global", "region-b"},
		[2]string{"region-a", "zone-a1"}, [2]string{"region-a", "zone-a2"},
		[2]string{"region-b", "zone-b1"}, [2]string{"region-b", "zone-b2"},
	)
	return g, []string{"global", "region-a", "region-b", "zone-a1", "zone-a2", "zone-b1", "zone-b2"}
}

// path is a shortest path from one cache to another, both included; nil
// when there is none. In a chain or a tree it is the only one.
func (g peerGraph) path(from, to string) []string {
	prev := map[string]string{from: ""}
	for queue := []string{from}; len(queue) > 0 && queue[0] != to; queue = queue[1:] {
		for _, p := range g[queue[0]] {
			if _, seen := prev[p]; !seen {
				prev[p] = queue[0]
				queue = append(queue, p)
			}
		}
	}
	if _, ok := prev[to]; !ok {
		return nil
	}
	var out []string
	for n := to; n != ""; n = prev[n] {
		out = append([]string{n}, out...)
	}
	return out
}

// streams is the number of mirror streams each cache runs: one per peer
// and served type, as the mirror's Run starts them
// (cache/server/mirror/mirror.go: a stream per type for every peer).
func (g peerGraph) streams(types int) map[string]int {
	out := map[string]int{}
	for name, peers := range g {
		out[name] = len(peers) * types
	}
	return out
}

// streamFigures are the streams of every cache of a graph.
type streamFigures struct {
	perCache   map[string]int
	max, total int
}

func (g peerGraph) streamFigures(types int) streamFigures {
	f := streamFigures{perCache: g.streams(types)}
	for _, n := range f.perCache {
		f.max = max(f.max, n)
		f.total += n
	}
	return f
}
