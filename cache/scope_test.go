package cache

import (
	"strings"
	"testing"
)

func TestValidateShardName(t *testing.T) {
	valid := []string{"amber", "shard-1", "system:cache:server", "a", strings.Repeat("a", 61)}
	invalid := []string{"", "Amber", "-a", "a-", ":a", "a/b", ".", "..", "a.b", strings.Repeat("a", 62), "*"}
	for _, n := range valid {
		if err := ValidateShardName(n); err != nil {
			t.Errorf("ValidateShardName(%q) = %v, want nil", n, err)
		}
	}
	for _, n := range invalid {
		if err := ValidateShardName(n); err == nil {
			t.Errorf("ValidateShardName(%q) = nil, want an error", n)
		}
	}
}

func TestValidateClusterName(t *testing.T) {
	valid := []string{"root", "2x9j3n5h", "system:system-crds", "system:admin"}
	invalid := []string{"", "a", "Root", "root:org", "system:", "system:a/b", "system:..", "ro/ot", "..", "*"}
	for _, n := range valid {
		if err := ValidateClusterName(n); err != nil {
			t.Errorf("ValidateClusterName(%q) = %v, want nil", n, err)
		}
	}
	for _, n := range invalid {
		if err := ValidateClusterName(n); err == nil {
			t.Errorf("ValidateClusterName(%q) = nil, want an error", n)
		}
	}
	if err := ValidateClusterName("root:org"); err == nil || !strings.Contains(err.Error(), "workspace path") {
		t.Errorf("a workspace path should be called one, got %v", err)
	}
}

func TestScopeIsWildcard(t *testing.T) {
	for s, want := range map[Scope]bool{{"a", "root"}: false, {"*", "root"}: true, {"a", "*"}: true, {"*", "*"}: true} {
		if got := s.IsWildcard(); got != want {
			t.Errorf("%v.IsWildcard() = %v, want %v", s, got, want)
		}
	}
}
