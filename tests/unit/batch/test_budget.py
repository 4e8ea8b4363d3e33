"""The bound on the bytes of documents a worker holds at once (ocr_batch_worker.budget)."""

import asyncio

from ocr_batch_worker.budget import ByteBudget


def test_documents_wait_while_their_bytes_do_not_fit_and_go_in_as_bytes_free():
    async def scenario() -> list[str]:
        budget, order = ByteBudget(100), []

        async def doc(name: str, size: int, hold: float) -> None:
            async with budget.hold(size):
                order.append(f"+{name}")
                assert budget.held <= 100
                await asyncio.sleep(hold)
            order.append(f"-{name}")

        await asyncio.gather(doc("a", 60, 0.05), doc("b", 30, 0.01), doc("c", 50, 0.01))
        return order

    order = asyncio.run(scenario())
    assert order.index("+c") > order.index("-a")  # 60 + 30 + 50 > 100: c waits for a
    assert order.index("+b") < order.index("-a")  # b fits beside a


def test_a_document_larger_than_the_budget_goes_in_alone():
    async def scenario() -> int:
        budget = ByteBudget(100)
        async with budget.hold(250):
            return budget.held

    assert asyncio.run(scenario()) == 250
