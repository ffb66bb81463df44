import Foundation
import NIOConcurrencyHelpers
import NIOPosix
import Testing

@testable import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The calling thread, as a number that closures may carry (`Thread` is not `Sendable`).
private func currentThread() -> UInt {
    #if canImport(Darwin)
    UInt(bitPattern: pthread_self())
    #else
    UInt(pthread_self())
    #endif
}

@Suite("Work run one piece at a time")
struct OneAtATimeTests {
    @Test func aPieceThatFindsNothingRunningRunsAtOnceOnItsOwnThread() {
        let runner = OneAtATime()
        let ranOn = NIOLockedValueBox<UInt?>(nil)
        runner.run { ranOn.withLockedValue { $0 = currentThread() } }
        #expect(ranOn.withLockedValue { $0 } == currentThread())
    }

    @Test func piecesFromManyThreadsNeverRunTogetherAndNoneIsLost() async {
        let runner = OneAtATime()
        let running = NIOLockedValueBox(0)
        let overlaps = NIOLockedValueBox(0)
        let done = NIOLockedValueBox<[Int]>([])
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for step in 0..<500 {
                        runner.run {
                            if running.withLockedValue({
                                $0 += 1; return $0
                            }) > 1 {
                                overlaps.withLockedValue { $0 += 1 }
                            }
                            done.withLockedValue { $0.append(task * 1_000 + step) }
                            // Long enough for another thread's piece to start meanwhile, were pieces not kept apart.
                            for _ in 0..<50 { _ = running.withLockedValue { $0 } }
                            running.withLockedValue { $0 -= 1 }
                        }
                    }
                }
            }
        }
        // A piece queued last runs on the thread running when it came, maybe after the tasks have returned.
        let started = ContinuousClock.now
        while done.withLockedValue({ $0.count }) < 4_000, ContinuousClock.now - started < .seconds(10) {
            try? await Task.sleep(for: .milliseconds(1))
        }
        #expect(overlaps.withLockedValue { $0 } == 0)
        let values = done.withLockedValue { $0 }
        #expect(values.count == 4_000)
        #expect(Set(values).count == 4_000)
        for task in 0..<8 {
            let own = values.filter { $0 / 1_000 == task }
            #expect(own == own.sorted(), "a thread's pieces run in the order it gave them")
        }
    }

    @Test func aPieceThatComesWhileAnotherRunsWaitsForItAndRunsOnItsThread() async throws {
        let runner = OneAtATime()
        let log = NIOLockedValueBox<[(String, UInt)]>([])
        let release = NIOLockedValueBox(false)
        let first = Thread {
            runner.run {
                log.withLockedValue { $0.append(("first", currentThread())) }
                while !release.withLockedValue({ $0 }) { usleep(1_000) }
            }
        }
        first.start()
        let started = ContinuousClock.now
        while log.withLockedValue({ $0.count }) == 0, ContinuousClock.now - started < .seconds(10) {
            try await Task.sleep(for: .milliseconds(1))
        }
        runner.run { log.withLockedValue { $0.append(("second", currentThread())) } }
        #expect(log.withLockedValue { $0.count } == 1, "returned at once, the second piece queued")
        release.withLockedValue { $0 = true }
        while log.withLockedValue({ $0.count }) < 2, ContinuousClock.now - started < .seconds(10) {
            try await Task.sleep(for: .milliseconds(1))
        }
        let entries = log.withLockedValue { $0 }
        #expect(entries.map(\.0) == ["first", "second"])
        #expect(entries.count == 2 && entries[0].1 == entries[1].1, "the second ran on the first one's thread")
    }

    @Test func piecesHandedToALoopRunThereInOrder() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let runner = OneAtATime()
        let log = NIOLockedValueBox<[(Int, Bool)]>([])
        runner.run((0..<5).map { index in { log.withLockedValue { $0.append((index, loop.inEventLoop)) } } }, on: loop)
        let started = ContinuousClock.now
        while log.withLockedValue({ $0.count }) < 5, ContinuousClock.now - started < .seconds(10) {
            try await Task.sleep(for: .milliseconds(1))
        }
        #expect(log.withLockedValue { $0.map(\.0) } == [0, 1, 2, 3, 4])
        #expect(log.withLockedValue { $0.allSatisfy(\.1) })
        try await group.shutdownGracefully()
    }
}
