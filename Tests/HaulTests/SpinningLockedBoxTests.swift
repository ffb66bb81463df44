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
