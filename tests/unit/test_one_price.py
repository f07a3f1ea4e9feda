"""One price (issue item 3): every command and construct that prices an hour of Spot or On-Demand takes it from one
function (``ml_platform_job.prices.hourly_usd``) over the one table, and they agree exactly, for every type of every
Region the shipped table prices: the advisor's options (``./platform advise``), the budget guard's ``price_per_hour``
(and ``budget what-if``, which runs it), ``./platform cost``'s per-instance rates, and ``hourly_usd`` itself (job
cost, run passports, the goodput ledger)."""

from datetime import datetime, timezone

import pytest

from ml_platform_constructs.advice import budget_what_if
from ml_platform_constructs.advice.advisor import PRESETS, advise
from ml_platform_constructs.advice.gpu_catalog import ACCELERATOR_CATALOG, GPU_CATALOG
from ml_platform_constructs.runtime.handlers.budget_guard import ON_DEMAND, SPOT, price_per_hour
from ml_platform_job.prices import hourly_usd, load_prices, load_table, price_source
from ops import cost_estimate

TABLE = load_table()
REGIONS = sorted(TABLE["regions"])
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def fleet_group(instance_type: str) -> dict:
    """A synthesized fleet's Auto Scaling group with one instance type (Spot above no On-Demand base)."""
    return {"Properties": {"MaxSize": "1", "Tags": [], "MixedInstancesPolicy": {
        "LaunchTemplate": {"Overrides": [{"InstanceType": instance_type}]},
        "InstancesDistribution": {"OnDemandBaseCapacity": 0, "OnDemandPercentageAboveBaseCapacity": 0}}}}


def queue_environment(instance_type: str, spot: bool) -> dict:
    """A synthesized training queue's compute environment of one type, as large as one instance."""
    return {"Properties": {"ComputeResources": {"Type": "SPOT" if spot else "EC2", "InstanceTypes": [instance_type],
                                                "MaxvCpus": GPU_CATALOG[instance_type].vcpus}}}


def what_if_hourly(prices: dict, instance_type: str, lifecycle: str) -> float:
    """The running cost ``budget what-if`` reports for one instance of the type (the guard's decision rounds its
    figures to cents)."""
    spec = [f"{instance_type}=1"]
    result = budget_what_if.what_if(label="one price", prices=prices, monthly_limit=1e9, stop_at_percent=100,
                                    actual=0, budget_age_hours=0, running=spec if lifecycle == SPOT else [],
                                    on_demand=spec if lifecycle == ON_DEMAND else [], now=NOW)
    return result["hourly_cost"]


def every_price(prices: dict) -> dict[str, dict[str, dict[str, float]]]:
    """Per type and lifecycle, what each command prices an hour at, each through its own public function."""
    options = {o.instance_type: o for o in advise(PRESETS["bert-large-finetune"], prices=prices, target="none",
                                                  max_instances=1).options}
    found = {}
    for name in prices["on_demand_hourly"]:
        found[name] = {
            ON_DEMAND: {"hourly_usd": hourly_usd(prices, name, ON_DEMAND),
                        "advisor": options[name].on_demand_hourly,
                        "budget guard": price_per_hour(name, ON_DEMAND, prices),
                        "cost (instance_hourly)": cost_estimate.instance_hourly([name], ON_DEMAND, prices)[0]},
            SPOT: {"hourly_usd": hourly_usd(prices, name, SPOT),
                   "advisor": options[name].spot_hourly,
                   "budget guard": price_per_hour(name, SPOT, prices),
                   "cost (instance_hourly)": cost_estimate.instance_hourly([name], SPOT, prices)[0]}}
        if name in GPU_CATALOG:  # fleets and queues hold NVIDIA types only
            fleet = cost_estimate.fleet_estimate("Fleet", fleet_group(name), [], prices)
            found[name][ON_DEMAND]["cost (fleet)"] = fleet.hourly_on_demand
            found[name][SPOT]["cost (fleet)"] = fleet.hourly_spot
    return found


@pytest.mark.parametrize("region", REGIONS)
def test_every_command_prices_every_type_alike(region):
    prices = load_prices(region)
    assert set(prices["on_demand_hourly"]) == set(ACCELERATOR_CATALOG)  # every type the advisor ranks is priced
    disagree = {(name, lifecycle): by_command
                for name, lifecycles in every_price(prices).items() for lifecycle, by_command in lifecycles.items()
                if len(set(by_command.values())) != 1}
    assert disagree == {}
    # budget what-if runs the guard's decision, which reports its figures in cents
    for name in prices["on_demand_hourly"]:
        for lifecycle in (SPOT, ON_DEMAND):
            assert what_if_hourly(prices, name, lifecycle) == round(hourly_usd(prices, name, lifecycle), 2)
    # the one rule: On-Demand from the table; Spot at the family's conservative discount, never above On-Demand
    for name, on_demand in prices["on_demand_hourly"].items():
        discount = prices["spot_discount"].get(name.split(".")[0], 0.0)
        assert hourly_usd(prices, name, ON_DEMAND) == on_demand
        assert hourly_usd(prices, name, SPOT) == pytest.approx(on_demand * (1 - discount), rel=1e-12)
        assert hourly_usd(prices, name, SPOT) <= on_demand


@pytest.mark.parametrize("region", REGIONS)
def test_a_queue_is_priced_per_vcpu_from_the_same_rates(region):
    """A queue's estimate divides each type's rate by its vCPUs (the queue's size is in vCPUs): for a queue of one
    instance that is the same rate, to the last bit or one rounding of the division."""
    prices = load_prices(region)
    for name in GPU_CATALOG:
        for spot, lifecycle in ((True, SPOT), (False, ON_DEMAND)):
            queue = cost_estimate.queue_estimate("Queue", queue_environment(name, spot), prices)
            assert queue.hourly == pytest.approx(hourly_usd(prices, name, lifecycle), rel=1e-15, abs=0)


def test_the_issues_example_is_one_price_now():
    """A g6e.24xlarge Spot hour in prod (us-west-2) was 4.67 USD in advise (the Spot Instance Advisor's 69% 30-day
    average) and 10.40 in budget what-if (the table's 31% g6e discount). Both are now the guard's 10.40."""
    prices = load_prices("us-west-2")
    advisor = next(o for o in advise(PRESETS["llm-7b-lora"], prices=prices, target="none", max_instances=1).options
                   if o.instance_type == "g6e.24xlarge")
    assert advisor.spot_hourly == price_per_hour("g6e.24xlarge", SPOT, prices) == pytest.approx(10.40, abs=0.005)
    assert what_if_hourly(prices, "g6e.24xlarge", SPOT) == 10.40
    assert advisor.spot_savings == pytest.approx(0.31) and advisor.advisor_savings == 0.69  # shown, not the price


def test_a_measured_spot_price_in_the_table_is_preferred_by_every_command():
    """A team's table may carry a measured per-type Spot price (``spot_hourly``): every command takes it, capped at
    On-Demand; the other types keep the family discount."""
    shipped = load_prices("us-east-1")
    prices = {**shipped, "spot_hourly": {"g5.xlarge": 0.3, "g6.xlarge": 99.0}}
    found = every_price(prices)
    assert {name: set(found[name][SPOT].values()) for name in ("g5.xlarge", "g6.xlarge", "g5.2xlarge")} == {
        "g5.xlarge": {0.3}, "g6.xlarge": {shipped["on_demand_hourly"]["g6.xlarge"]},
        "g5.2xlarge": {shipped["on_demand_hourly"]["g5.2xlarge"] * (1 - shipped["spot_discount"]["g5"])}}


def test_an_unknown_type_raises_unless_the_caller_asks_for_the_dearest_rate():
    prices = load_prices("us-east-1")
    with pytest.raises(KeyError, match=r"instance_type='x9.large' has no price in the us-east-1 table \(49 types "
                                       r"priced\): use a priced type, or refresh the table"):
        hourly_usd(prices, "x9.large", SPOT)
    dearest = max(prices["on_demand_hourly"].values())
    assert hourly_usd(prices, "x9.large", ON_DEMAND, unknown="dearest") == dearest
    # the budget guard prices whatever runs at the dearest rate (its family's discount for Spot): it errs high
    assert price_per_hour("x9.large", SPOT, prices) == dearest
    assert hourly_usd(prices, "x9.large", SPOT, unknown="dearest") == dearest  # no x9 family discount
    assert price_per_hour("g5.96xlarge", SPOT, prices) == dearest * (1 - prices["spot_discount"]["g5"])
    with pytest.raises(ValueError, match=r"unknown='cheapest': one of \('raise', 'dearest'\)"):
        hourly_usd(prices, "g5.xlarge", SPOT, unknown="cheapest")
    with pytest.raises(ValueError, match=r"lifecycle='reserved': one of \('spot', 'on-demand'\)"):
        hourly_usd(prices, "g5.xlarge", "reserved")


@pytest.mark.parametrize("region", REGIONS)
def test_the_price_line_gives_the_tables_date_and_source(region):
    prices = load_prices(region)
    line = price_source(prices)
    entry = TABLE["regions"][region]
    assert line.startswith(f"{region} ({entry['retrieved']}): {entry['source'].rstrip('. ')}; Spot = On-Demand x")
    assert entry["spot_discount_note"].rstrip(". ") in line
    assert price_source(prices, detail=False) == (f"{region} ({entry['retrieved']}); Spot at the family's "
                                                  "conservative discount")


def test_the_price_line_of_a_region_the_table_lacks_and_of_a_bare_table():
    assert price_source(load_prices("mx-central-1"), detail=False).startswith(
        "mx-central-1 (2026-11-29), the table has no mx-central-1 rates: the dearest of its Regions'")
    bare = {"region": "mx-central-1", "on_demand_hourly": {"g5.xlarge": 2.0}, "spot_discount": {"g5": 0.5}}
    assert price_source(bare) == ("mx-central-1 (no date in the table): no source in the table; Spot = On-Demand x "
                                  "(1 - the family's spot_discount, the table's conservative low end), or the type's "
                                  "own spot_hourly where the table has one; never above On-Demand")


def test_budget_what_if_and_advise_show_where_their_prices_come_from(capsys):
    from ops import advise as advise_command
    prices = load_prices("us-west-2")
    result = budget_what_if.what_if(label="prod", prices=prices, monthly_limit=10_000, stop_at_percent=90, actual=0,
                                    budget_age_hours=0, running=["g6e.24xlarge=3"], on_demand=[], now=NOW)
    assert result["prices"] == price_source(prices) and result["prices_short"] == price_source(prices, detail=False)
    assert result["prices"].startswith("us-west-2 (2026-11-29): EC2 On-Demand rates for the catalog types")
    text = budget_what_if.format_what_if(result)
    assert text.endswith("\n  prices: us-west-2 (2026-11-29); Spot at the family's conservative discount (--json: "
                         "their source)")
    assert advise_command.main(["bert-large-finetune", "--env", "prod"]) == 0
    assert "\nPrices: us-west-2 (2026-11-29); Spot at the family's conservative discount" in capsys.readouterr().out


def test_a_teams_measured_spot_prices_are_checked_and_a_refresh_drops_them():
    from datetime import date

    from ml_platform_constructs.advice.price_table import refresh, table_problem
    entry = {"on_demand_hourly": {"g5.xlarge": 1.0}, "spot_discount": {"g5": 0.5}}
    assert table_problem({"regions": {"us-east-1": {**entry, "spot_hourly": {"g5.xlarge": 0.4}}}}) is None
    assert table_problem({"regions": {"us-east-1": {**entry, "spot_hourly": {"g5.xlarge": -1}}}}) == (
        "Region us-east-1: measured Spot prices must be positive USD per hour, not g5.xlarge=-1")
    assert table_problem({"regions": {"us-east-1": {**entry, "spot_hourly": [0.4]}}}) == (
        "Region us-east-1: 'spot_hourly' must map instance types to USD per hour")

    class NoPrices:  # the Price List answers nothing: every type keeps its old rate
        def get_products(self, **_):
            return {"PriceList": []}

    table = {"regions": {"us-east-1": {**entry, "spot_hourly": {"g5.xlarge": 0.4}}}}
    refreshed = refresh(table, NoPrices(), None, "us-east-1", date(2026, 12, 1), NOW)
    assert "spot_hourly" not in refreshed["regions"]["us-east-1"]
    assert hourly_usd(load_prices("us-east-1", refreshed), "g5.xlarge", SPOT) == 0.5
