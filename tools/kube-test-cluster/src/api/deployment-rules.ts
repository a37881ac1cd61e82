/**
 * apps/v1 Deployment defaulting and strategy validation, as the API server does them: a
 * missing strategy becomes RollingUpdate with 25%/25%, `rollingUpdate` next to `Recreate` is
 * forbidden (the trap of rendering both, or of patching `type` on an object that carries the
 * defaulted block), and maxSurge/maxUnavailable are IntOrString (an integer ≥ 0 or `N%` up to
 * 100%, unavailability at most 100%), never both zero. Messages are the API server's.
 */
import type { KindRules } from "./kinds.js";
import type { StatusCause } from "./status-error.js";
import type { JsonObject } from "./types.js";
import { isObject } from "./types.js";

const percent = /^[0-9]+%$/;
const percentHelp =
  "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";

/** The value of an IntOrString as Go prints it in a field error. */
function shown(v: unknown): string {
  return typeof v === "string" ? JSON.stringify(v) : String(v);
}

/** An IntOrString that must be ≥ 0 (and, for a percentage, at most 100% when `max100`); its value, or causes. */
function intOrPercent(v: unknown, field: string, max100: boolean, causes: StatusCause[]): number | undefined {
  const invalid = (message: string) =>
    causes.push({ reason: "FieldValueInvalid", field, message: `Invalid value: ${shown(v)}: ${message}` });
  if (typeof v === "number") {
    if (!Number.isInteger(v)) return void invalid("must be an integer");
    if (v < 0) return void invalid("must be greater than or equal to 0");
    return v;
  }
  if (typeof v !== "string" || !percent.test(v)) return void invalid(percentHelp);
  const n = Number(v.slice(0, -1));
  if (max100 && n > 100) return void invalid("must not be greater than 100%");
  return n;
}

export const deploymentRules: KindRules = {
  defaultOnCreate(obj) {
    const spec = isObject(obj.spec) ? obj.spec : (obj.spec = {});
    const strategy: JsonObject = isObject(spec.strategy) ? spec.strategy : (spec.strategy = {});
    strategy.type ??= "RollingUpdate";
    if (strategy.type === "RollingUpdate") {
      const ru: JsonObject = isObject(strategy.rollingUpdate) ? strategy.rollingUpdate : (strategy.rollingUpdate = {});
      ru.maxUnavailable ??= "25%";
      ru.maxSurge ??= "25%";
    }
  },
  validate(obj) {
    const causes: StatusCause[] = [];
    const spec = isObject(obj.spec) ? obj.spec : {};
    const strategy = isObject(spec.strategy) ? spec.strategy : {};
    const type = strategy.type ?? "RollingUpdate";
    if (type === "Recreate") {
      if (strategy.rollingUpdate !== undefined && strategy.rollingUpdate !== null) {
        causes.push({
          reason: "FieldValueForbidden",
          field: "spec.strategy.rollingUpdate",
          message: "Forbidden: may not be specified when strategy `type` is 'Recreate'",
        });
      }
    } else if (type === "RollingUpdate") {
      const ru = isObject(strategy.rollingUpdate) ? strategy.rollingUpdate : {};
      const path = "spec.strategy.rollingUpdate";
      const unavailable =
        ru.maxUnavailable === undefined
          ? undefined
          : intOrPercent(ru.maxUnavailable, `${path}.maxUnavailable`, true, causes);
      const surge =
        ru.maxSurge === undefined ? undefined : intOrPercent(ru.maxSurge, `${path}.maxSurge`, false, causes);
      if (unavailable === 0 && surge === 0) {
        causes.push({
          reason: "FieldValueInvalid",
          field: `${path}.maxUnavailable`,
          message: `Invalid value: ${shown(ru.maxUnavailable)}: may not be 0 when \`maxSurge\` is 0`,
        });
      }
    } else {
      causes.push({
        reason: "FieldValueNotSupported",
        field: "spec.strategy.type",
        message: `Unsupported value: ${shown(type)}: supported values: "Recreate", "RollingUpdate"`,
      });
    }
    return causes;
  },
};
