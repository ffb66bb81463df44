import Testing

@testable import HaulHTTP1

@Suite("A plain-http connection's exchanges")
struct HTTP1ConnectionStateMachineTests {
    typealias Machine = HTTP1Connection.StateMachine

    /// A machine that has carried `served` exchanges and is idle again.
    func machine(served: Int) -> Machine {
        var machine = Machine()
        for _ in 0..<served {
            _ = machine.requestStarted()
            _ = machine.headReceived(keepAlive: true)
            _ = machine.endReceived(isActive: true)
        }
        return machine
    }

    @Test func anExchangeSendsDeliversAndGivesAKeptAliveConnectionBack() {
        var machine = Machine()
        #expect(machine.requestStarted() == .sendRequest)
        #expect(machine.headReceived(keepAlive: true) == .deliver)
        #expect(machine.bodyReceived() == .deliver)
        #expect(machine.bodyReceived() == .deliver)
        #expect(machine.endReceived(isActive: true) == .finishExchange(reuse: true))
        #expect(machine.state == .idle(served: 1))
    }

    @Test func aResponseThatDoesNotKeepTheConnectionAliveClosesIt() {
        var machine = Machine()
        _ = machine.requestStarted()
        _ = machine.headReceived(keepAlive: false)
        #expect(machine.endReceived(isActive: true) == .finishExchange(reuse: false))
        #expect(machine.state == .closed)
    }

    @Test func aBodyThatEndedWithTheConnectionIsNotReused() {
        var machine = Machine()
        _ = machine.requestStarted()
        _ = machine.headReceived(keepAlive: true)
        #expect(machine.endReceived(isActive: false) == .finishExchange(reuse: false))
        #expect(machine.connectionClosed() == .none)
    }

    @Test func aReusedConnectionClosedBeforeTheHeadAsksForAnotherConnection() {
        var machine = self.machine(served: 2)
        #expect(machine.requestStarted() == .sendRequest)
        #expect(machine.connectionClosed() == .failExchange(.closedBeforeResponseOnReusedConnection))
        #expect(machine.state == .closed)
    }

    @Test func aNewConnectionClosedBeforeTheHeadFailsTheExchange() {
        var machine = Machine()
        _ = machine.requestStarted()
        #expect(machine.connectionClosed() == .failExchange(.closedBeforeEnd))
    }

    @Test func aConnectionClosedDuringTheBodyFailsTheExchange() {
        var machine = self.machine(served: 1)
        _ = machine.requestStarted()
        _ = machine.headReceived(keepAlive: true)
        _ = machine.bodyReceived()
        #expect(machine.connectionClosed() == .failExchange(.closedBeforeEnd))
    }

    @Test func silenceFailsAnExchangeAndClosesAnIdleConnection() {
        var waiting = Machine()
        _ = waiting.requestStarted()
        #expect(waiting.readTimedOut() == .failExchange(.timedOut))
        var receiving = Machine()
        _ = receiving.requestStarted()
        _ = receiving.headReceived(keepAlive: true)
        #expect(receiving.readTimedOut() == .failExchange(.timedOut))
        var idle = self.machine(served: 1)
        #expect(idle.readTimedOut() == .close)
        #expect(idle.state == .closed)
    }

    @Test func anErrorFailsTheExchangeOnceAndLaterEventsAreIgnored() {
        var machine = Machine()
        _ = machine.requestStarted()
        _ = machine.headReceived(keepAlive: true)
        #expect(machine.errorOccurred() == .failExchange(.error))
        #expect(machine.errorOccurred() == .none)
        #expect(machine.bodyReceived() == .none)
        #expect(machine.endReceived(isActive: true) == .none)
        #expect(machine.connectionClosed() == .none)
    }

    @Test func aRequestOnAClosedConnectionIsRefusedForAnotherConnection() {
        var machine = Machine()
        _ = machine.connectionClosed()
        #expect(machine.requestStarted() == .refuseRequest)
    }

    @Test func anUnreadableResponseOnAReusedConnectionBeforeItsHeadAsksForAnotherConnection() {
        // What the last response left over (more than its framing said) cannot begin the next one.
        var reused = self.machine(served: 1)
        _ = reused.requestStarted()
        #expect(reused.responseUnreadable() == .failExchange(.closedBeforeResponseOnReusedConnection))
        var fresh = Machine()
        _ = fresh.requestStarted()
        #expect(fresh.responseUnreadable() == .failExchange(.error))
        var midBody = self.machine(served: 1)
        _ = midBody.requestStarted()
        _ = midBody.headReceived(keepAlive: true)
        #expect(midBody.responseUnreadable() == .failExchange(.error))
    }

    @Test func aResponseNobodyAskedForClosesTheConnection() {
        var idle = self.machine(served: 1)
        #expect(idle.headReceived(keepAlive: true) == .close)
        var bodyWhileIdle = Machine()
        #expect(bodyWhileIdle.bodyReceived() == .close)
        var endWhileWaiting = Machine()
        _ = endWhileWaiting.requestStarted()
        #expect(endWhileWaiting.endReceived(isActive: true) == .close)
    }
}
