import Foundation
import Testing

@testable import Haul

@Suite("A value behind a spinning lock")
struct SpinningLockedBoxTests {
    struct Failure: Error {}

    @Test func changesFromManyTasksAtOnceAreAllKept() async {
        let box = SpinningLockedBox([Int]())
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for step in 0..<2_000 { box.withLockedValue { $0.append(task * 10_000 + step) } }
                }
            }
        }
        let values = box.withLockedValue { $0 }
        #expect(values.count == 16_000)
        #expect(Set(values).count == 16_000)
    }

    @Test func aThreadWaitingLongerThanItSpinsTakesTheLockOnlyAfterTheHolderReleasesIt() {
        // The holder keeps the lock far longer than the spin lasts (1,000 pauses, microseconds): the waiter falls back
        // to sleeping in the kernel and takes the lock only after the holder's whole change.
        let box = SpinningLockedBox([String]())
        let holding = DispatchSemaphore(value: 0)
        let holder = Thread {
            box.withLockedValue { log in
                holding.signal()
                log.append("holder took it")
                Thread.sleep(forTimeInterval: 0.05)
                log.append("holder let it go")
            }
        }
        holder.start()
        holding.wait()
        box.withLockedValue { $0.append("waiter took it") }
        #expect(box.withLockedValue { $0 } == ["holder took it", "holder let it go", "waiter took it"])
    }

    @Test func aThrowingBodyLeavesItsChangeAndTheLockFree() {
        let box = SpinningLockedBox(1)
        #expect(throws: Failure.self) {
            try box.withLockedValue { (value: inout Int) throws(Failure) in
                value = 2
                throw Failure()
            }
        }
        #expect(box.withLockedValue { $0 } == 2)
    }

    @Test func theValueIsReleasedWithTheBox() {
        final class Token: Sendable {}
        weak var weakToken: Token?
        do {
            let token = Token()
            weakToken = token
            let box = SpinningLockedBox(token)
            #expect(box.withLockedValue { $0 } === token)
        }
        #expect(weakToken == nil)
    }
}
