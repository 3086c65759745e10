package homes_test

import (
	"context"
	"reflect"
	"sync"
	"testing"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

func route(path ...string) kcpcache.Route {
	return kcpcache.Route{Home: path[len(path)-1], Path: path}
}

// offered returns the homes a table offers onward, with their paths.
func offeredPaths(ans kcpcache.HomesAnswer) map[string][]string {
	out := map[string][]string{}
	for _, r := range ans.Routes {
		out[r.Home] = r.Path
	}
	return out
}

// TestRoutesTakeTheShortestPathThatAvoidsThisCache: east peers north and
// west. A home is taken from the peer with the shortest path to it that
// does not name east; a path through east is never taken (a loop); a
// withdrawn path keeps its peer until another live one appears, and then
// the table says so to the mirror.
func TestRoutesTakeTheShortestPathThatAvoidsThisCache(t *testing.T) {
	ctx := context.Background()
	table, _ := newTable(t, tableConfig{peers: map[string]peerSpec{
		"west": {routes: [][]kcpcache.Route{
			{route("west", "south"), route("west", "east", "north", "far")},
			{},
		}},
		"north": {routes: [][]kcpcache.Route{
			{route("north", "x", "south"), route("north", "far")},
			{route("north", "x", "south"), route("north", "far")},
			{route("north", "south"), route("north", "far")},
		}},
	}})
	var mu sync.Mutex
	var changes []string
	table.OnRouteChange(func(_ context.Context, home, from, to string) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, home+":"+from+"->"+to)
	})

	table.AskPeers(ctx, "")
	for home, want := range map[string]string{"south": "west", "far": "north", "west": "west", "north": "north"} {
		if via, live, ok := table.Via(home); !ok || !live || via != want {
			t.Errorf("home %s: via %q (live %v, known %v), want %q, live", home, via, live, ok, want)
		}
	}
	if got, want := table.Path("south"), []string{"east", "west", "south"}; !reflect.DeepEqual(got, want) {
		t.Errorf("path to south %v, want %v", got, want)
	}
	if _, _, ok := table.Via("nowhere"); ok {
		t.Error("a home nobody offers has an upstream")
	}
	if got, want := offeredPaths(table.Answer("")), map[string][]string{
		"east": {"east"}, "south": {"east", "west", "south"}, "far": {"east", "north", "far"},
		"west": {"east", "west"}, "north": {"east", "north"},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("offered %v, want %v", got, want)
	}

	_, viaWest, _ := table.Upstream("south")

	// West withdraws south; north's path is longer but the only live one:
	// taken, at a new generation (a stream of west no longer has what
	// south writes from now on). (The first answers arrive in any order:
	// changes are counted from here.)
	mu.Lock()
	changes = nil
	mu.Unlock()
	table.AskPeers(ctx, "")
	if via, live, _ := table.Via("south"); via != "north" || !live {
		t.Errorf("south after west withdrew it: via %q live %v, want north, live", via, live)
	}
	peer, viaNorth, ok := table.Upstream("south")
	if !ok || peer != "north" || viaNorth == viaWest {
		t.Errorf("south's upstream after the switch: %q at generation %d (known %v), want north at another generation than west's %d", peer, viaNorth, ok, viaWest)
	}
	// North's path gets shorter: still north, and no change is told; the
	// generation stays.
	table.AskPeers(ctx, "")
	if got, want := table.Path("south"), []string{"east", "north", "south"}; !reflect.DeepEqual(got, want) {
		t.Errorf("path to south %v, want %v", got, want)
	}
	if peer, gen, _ := table.Upstream("south"); peer != "north" || gen != viaNorth {
		t.Errorf("south's upstream after north's path changed: %q at generation %d, want north at %d", peer, gen, viaNorth)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"south:west->north"}; !reflect.DeepEqual(changes, want) {
		t.Errorf("route changes %v, want %v", changes, want)
	}
}

// TestRoutesKeepTheLastPeerWhenNoPathIsLive: a peer whose table stops
// answering offers nothing live after its routes' lifetime; the home keeps
// its last upstream (its copies stay), marked not live, and is no longer
// offered onward.
func TestRoutesKeepTheLastPeerWhenNoPathIsLive(t *testing.T) {
	ctx := context.Background()
	table, _ := newTable(t, tableConfig{peers: map[string]peerSpec{
		"west": {routes: [][]kcpcache.Route{{route("west", "south")}, {}}},
	}})
	table.AskPeers(ctx, "")
	if via, live, _ := table.Via("south"); via != "west" || !live {
		t.Fatalf("south: via %q live %v, want west, live", via, live)
	}
	_, before, _ := table.Upstream("south")
	table.AskPeers(ctx, "")
	via, live, ok := table.Via("south")
	if !ok || via != "west" || live {
		t.Errorf("south after west withdrew it: via %q live %v known %v, want west, not live", via, live, ok)
	}
	if _, after, _ := table.Upstream("south"); after != before {
		t.Errorf("south's route generation went from %d to %d when its path died: its peer did not change", before, after)
	}
	if _, offered := offeredPaths(table.Answer(""))["south"]; offered {
		t.Error("a home without a live path is offered onward")
	}
}
