import assert from "node:assert/strict";
import { test } from "node:test";
import { giveRemoteStateToken, tokenVariable, tokenVariableHost } from "@drover/agent";

/* The TF_TOKEN_<host> variable the agent gives a run for terraform_remote_state (decision 0072). */

test("the variable name follows terraform: dots become _, hyphens __, a port stays; reading it back gives the host", () => {
  assert.equal(tokenVariable("drover.example.com"), "TF_TOKEN_drover_example_com");
  assert.equal(tokenVariable("my-drover.example.com"), "TF_TOKEN_my__drover_example_com");
  assert.equal(tokenVariable("127.0.0.1:8443"), "TF_TOKEN_127_0_0_1:8443");
  assert.equal(tokenVariable("Drover.Example.com"), "TF_TOKEN_drover_example_com");
  for (const host of ["drover.example.com", "my-drover.example.com", "127.0.0.1:8443", "a--b.test"])
    assert.equal(tokenVariableHost(tokenVariable(host)), host);
  assert.equal(tokenVariableHost("TF_TOKEN_drover.example.com"), "drover.example.com");
  assert.equal(tokenVariableHost("TF_VAR_x"), undefined);
});

test("the job token goes in for the host; the agent's own spellings of that host are dropped, others kept", () => {
  const env: NodeJS.ProcessEnv = {
    TF_TOKEN_drover_example_com: "agent-own",
    "TF_TOKEN_drover.example.com": "agent-own-dotted",
    TF_TOKEN_registry_example_com: "registry",
  };
  giveRemoteStateToken(env, "drover.example.com", "drv_j_job", []);
  assert.deepEqual(env, { TF_TOKEN_drover_example_com: "drv_j_job", TF_TOKEN_registry_example_com: "registry" });
});

test("a workspace variable for the host, in any spelling, wins: the agent sets nothing", () => {
  for (const key of ["TF_TOKEN_drover_example_com", "TF_TOKEN_DROVER_EXAMPLE_COM", "TF_TOKEN_drover.example.com"]) {
    const env: NodeJS.ProcessEnv = {};
    giveRemoteStateToken(env, "drover.example.com", "drv_j_job", [key, "OTHER"]);
    assert.deepEqual(env, {}, key);
  }
  const env: NodeJS.ProcessEnv = {};
  giveRemoteStateToken(env, "drover.example.com", "drv_j_job", ["TF_TOKEN_other_example_com"]);
  assert.deepEqual(env, { TF_TOKEN_drover_example_com: "drv_j_job" });
});
