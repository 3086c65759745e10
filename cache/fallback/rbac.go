package fallback

import (
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// attributes is what RBAC decides on: the request as the shard's authorizers
// see it (k8s.io/apiserver/pkg/authorization/authorizer.Attributes, reduced
// to the fields RBAC reads).
type attributes struct {
	user  subjectUser
	verb  string
	group string
	// resource is "resource" or "resource/subresource".
	resource  string
	namespace string
	name      string
	// path is set for a non-resource request (discovery), resource is not.
	path string
}

// subjectUser is who a binding's subjects are matched against.
type subjectUser struct {
	name   string
	groups []string
}

// policy is the RBAC of one logical cluster as an RBAC authorizer of the shard
// sees it: the roles and bindings it evaluates, and where it looks roles up.
// kcp's authorizers look a role up in the workspace first and in the shard's
// bootstrap cluster second (rbacwrapper.NewMerged*Lister in kcp's
// pkg/authorization), which roleSources reproduces by order.
type policy struct {
	clusterRoleBindings []rbacv1.ClusterRoleBinding
	// roleBindings are those of the request's namespace.
	roleBindings []rbacv1.RoleBinding
	// clusterRoles and roles are looked up by name, first source first.
	clusterRoles []map[string]rbacv1.ClusterRole
	roles        []map[string]rbacv1.Role
}

// allows reports whether some binding of p grants a: the same walk as
// upstream's RBAC authorizer (k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac,
// VisitRulesFor then RuleAllows). A binding whose role is missing grants
// nothing, as upstream.
func (p policy) allows(a attributes) (bool, string) {
	for _, b := range p.clusterRoleBindings {
		if b.RoleRef.Kind != "ClusterRole" || !appliesTo(a.user, b.Subjects) {
			continue
		}
		if role, ok := lookup(p.clusterRoles, b.RoleRef.Name); ok && rulesAllow(role.Rules, a) {
			return true, "ClusterRoleBinding " + b.Name + " of ClusterRole " + role.Name
		}
	}
	for _, b := range p.roleBindings {
		if !appliesTo(a.user, b.Subjects) {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch b.RoleRef.Kind {
		case "ClusterRole":
			role, ok := lookup(p.clusterRoles, b.RoleRef.Name)
			if !ok {
				continue
			}
			rules = role.Rules
		case "Role":
			role, ok := lookup(p.roles, b.RoleRef.Name)
			if !ok || role.Namespace != b.Namespace {
				continue
			}
			rules = role.Rules
		default:
			continue
		}
		if rulesAllow(rules, a) {
			return true, "RoleBinding " + b.Namespace + "/" + b.Name + " of " + b.RoleRef.Kind + " " + b.RoleRef.Name
		}
	}
	return false, ""
}

func lookup[T any](sources []map[string]T, name string) (T, bool) {
	for _, s := range sources {
		if v, ok := s[name]; ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// appliesTo reports whether one of subjects is u. A ServiceAccount subject
// never matches: the fallback refuses service accounts before it gets here
// (kcp scopes them to their own workspace, which it does not reproduce).
func appliesTo(u subjectUser, subjects []rbacv1.Subject) bool {
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			if s.Name == u.name {
				return true
			}
		case rbacv1.GroupKind:
			if slices.Contains(u.groups, s.Name) {
				return true
			}
		}
	}
	return false
}

func rulesAllow(rules []rbacv1.PolicyRule, a attributes) bool {
	for _, r := range rules {
		if ruleAllows(r, a) {
			return true
		}
	}
	return false
}

// ruleAllows is upstream's RuleAllows (rbac's validation.go): a resource
// request needs the verb, the group, the resource and, when the rule names
// any, the object's name; a non-resource request needs the verb and the path.
func ruleAllows(r rbacv1.PolicyRule, a attributes) bool {
	if !matches(r.Verbs, a.verb) {
		return false
	}
	if a.path != "" {
		return nonResourceURLMatches(r.NonResourceURLs, a.path)
	}
	return matches(r.APIGroups, a.group) &&
		resourceMatches(r.Resources, a.resource) &&
		(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, a.name))
}

func matches(values []string, v string) bool {
	return slices.Contains(values, rbacv1.VerbAll) || slices.Contains(values, v)
}

// resourceMatches accepts "*", the exact "resource[/subresource]", and
// "*/subresource" for a subresource.
func resourceMatches(rules []string, resource string) bool {
	for _, r := range rules {
		if r == rbacv1.ResourceAll || r == resource {
			return true
		}
		if _, sub, ok := strings.Cut(resource, "/"); ok && r == "*/"+sub {
			return true
		}
	}
	return false
}

// nonResourceURLMatches accepts the exact path, "*", and a prefix ending in
// "*".
func nonResourceURLMatches(rules []string, path string) bool {
	for _, r := range rules {
		if r == rbacv1.NonResourceAll || r == path {
			return true
		}
		if prefix, ok := strings.CutSuffix(r, "*"); ok && strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}
