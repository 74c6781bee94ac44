package server

import (
	"net/http"
	"testing"
)

func TestRestrictionsSet(t *testing.T) {
	cases := []struct {
		grpc    bool
		specs   []string
		wantErr string
		want    string // String() after
	}{
		{false, []string{"model-repository:admin-key=admin-value", "inference,metadata:infer-key=infer-value"}, "",
			"metadata:infer-key;inference:infer-key;model-repository:admin-key"},
		{true, []string{"health:k=v=w"}, "", "health:triton-grpc-protocol-k"},
		{false, []string{"model-reposit,health:k1=v1"}, "unknown restricted api 'model-reposit'", ""},
		{true, []string{"model-reposit:k1=v1"}, "unknown restricted protocol 'model-reposit'", ""},
		{false, []string{"health:k=v", "metadata,health:k2=v2"}, "restricted api 'health' can not be specified in multiple config groups", "health:k"},
		{false, []string{"health:k"}, "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health:k", ""},
		{true, []string{"health:=v"}, "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. Got health:=v", ""},
		{false, []string{":k=v"}, "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got :k=v", ""},
		{false, []string{"health:k="}, "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health:k=", ""},
		{false, []string{"k=v:health"}, "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got k=v:health", ""},
		{false, []string{"health,:k=v"}, "unknown restricted api ''", ""},
	}
	for _, c := range cases {
		r := NewHTTPRestrictions()
		if c.grpc {
			r = NewGRPCRestrictions()
		}
		var err error
		for _, s := range c.specs {
			if err = r.Set(s); err != nil {
				break
			}
		}
		if got := errString(err); got != c.wantErr {
			t.Errorf("%q: error %q, want %q", c.specs, got, c.wantErr)
		}
		if r.String() != c.want {
			t.Errorf("%q: restricts %q, want %q", c.specs, r.String(), c.want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestRestrictionsCheck(t *testing.T) {
	r := NewHTTPRestrictions()
	if err := r.Set("inference:Infer-Key=secret"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		header http.Header
		group  APIGroup
		ok     bool
	}{
		{http.Header{}, GroupInference, false},
		{http.Header{"Infer-Key": {"secre"}}, GroupInference, false},
		{http.Header{"Infer-Key": {"secret!"}}, GroupInference, false},
		{http.Header{"Infer-Key": {"secret"}}, GroupInference, true},
		{http.Header{"Infer-Key": {"wrong", "secret"}}, GroupInference, false}, // the first value counts, as in Triton
		{http.Header{}, GroupHealth, true},
	}
	for _, c := range cases {
		msg := r.check(c.group, c.header.Get)
		if (msg == "") != c.ok {
			t.Errorf("%v %s: refusal %q, want allowed %v", c.header, c.group, msg, c.ok)
		}
		if !c.ok && msg != "This API is restricted, expecting header 'Infer-Key'" {
			t.Errorf("refusal %q", msg)
		}
	}
	var none *Restrictions
	if none.check(GroupInference, http.Header{}.Get) != "" || !none.Empty() {
		t.Error("a nil Restrictions restricts")
	}
}
